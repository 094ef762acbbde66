// Pipeline bubbles: per stage, each micro-batch's forward and backward over time, bubbles shaded.
// (Stub until the charts land; the public interface is fixed.)
#pragma once

#include <QWidget>

#include "views/common/opened_run.h"
#include "views/common/place.h"

namespace fulcrum::views {

class BubbleView : public QWidget {
    Q_OBJECT
public:
    explicit BubbleView(QWidget* parent = nullptr);
    ~BubbleView() override;

    void set_run(RunPtr run);
};

}  // namespace fulcrum::views
