// The headers nearly every Qt Test suite includes, precompiled once for all of them
// (tests/CMakeLists.txt, FULCRUM_PCH): Qt Test and Qt Core are a third of a suite's compile.
// Only Qt's and the standard library's headers: a Fulcrum header here would hide a missing
// include from the builds without precompiled headers (the sanitizer and fuzz builds).
#pragma once

#include <QFile>
#include <QObject>
#include <QProcess>
#include <QRegularExpression>
#include <QString>
#include <QTemporaryDir>
#include <QTest>
#include <QVector>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>
