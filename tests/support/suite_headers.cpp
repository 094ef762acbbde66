// Compiles the suites' precompiled header (tests/CMakeLists.txt, FULCRUM_PCH); no code.
