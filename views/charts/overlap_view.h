// Overlap: per rank, compute against copy lanes, overlap percentage and exposed copy time.
// (Stub until the charts land; the public interface is fixed.)
#pragma once

#include <QWidget>

#include "views/common/opened_run.h"
#include "views/common/place.h"

namespace fulcrum::views {

class OverlapView : public QWidget {
    Q_OBJECT
public:
    explicit OverlapView(QWidget* parent = nullptr);
    ~OverlapView() override;

    void set_run(RunPtr run);
};

}  // namespace fulcrum::views
