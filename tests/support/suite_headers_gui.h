// suite_headers.h and Qt Widgets, for the suites of the GUI (tests/views, tests/ui): their
// flags differ from the others' (QT_WIDGETS_LIB changes what <QTest> declares).
#pragma once

#include "tests/support/suite_headers.h"

#include <QApplication>
#include <QComboBox>
#include <QImage>
#include <QTableView>
#include <QWidget>
