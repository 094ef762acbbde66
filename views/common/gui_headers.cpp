// Compiles the GUI libraries' precompiled header (CMakeLists.txt, FULCRUM_PCH); no code.
