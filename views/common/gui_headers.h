// The Qt Widgets headers the GUI's libraries share, precompiled once for all of them
// (CMakeLists.txt, FULCRUM_PCH): QCustomPlot's header alone pulls in Qt Widgets and Qt
// Print Support, ~8 s of parsing per source. Only Qt's and the standard library's headers: a
// Fulcrum header here would hide a missing include from a build without precompiled headers.
#pragma once

#include <qcustomplot.h>
#include <QAbstractTableModel>
#include <QComboBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QTableView>
#include <QVBoxLayout>
#include <QWidget>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>
