// CP load: per CP rank, measured attention time against predicted work per micro-batch.
// (Stub until the charts land; the public interface is fixed.)
#pragma once

#include <QWidget>

#include "views/common/opened_run.h"
#include "views/common/place.h"

namespace fulcrum::views {

class CpLoadView : public QWidget {
    Q_OBJECT
public:
    explicit CpLoadView(QWidget* parent = nullptr);
    ~CpLoadView() override;

    void set_run(RunPtr run);
};

}  // namespace fulcrum::views
