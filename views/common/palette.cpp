#include "views/common/palette.h"

#include <array>

namespace fulcrum::views::palette {

QColor category(Category category) {
    // Compute in blues, attention in violet, communication in orange, copies in green: the
    // groups a reader looks for in a timeline stand apart, the containers stay pale.
    switch (category) {
        case Category::compute:
            return QColor(0x4c, 0x78, 0xa8);
        case Category::attention:
            return QColor(0x8e, 0x5e, 0xa8);
        case Category::communication:
            return QColor(0xf5, 0x85, 0x18);
        case Category::offload:
            return QColor(0x54, 0xa2, 0x4b);
        case Category::optimizer:
            return QColor(0xb2, 0x79, 0xa2);
        case Category::memory:
            return QColor(0x9d, 0x75, 0x5d);
        case Category::runtime:
            return QColor(0xba, 0xb0, 0xac);
        case Category::schedule:
            return QColor(0xd8, 0xdc, 0xe6);
        case Category::other:
            break;
    }
    return QColor(0x88, 0x88, 0x88);
}

QColor phase(Phase phase) {
    switch (phase) {
        case Phase::forward:
            return QColor(0x4c, 0x78, 0xa8);
        case Phase::backward:
            return QColor(0x72, 0xb7, 0xb2);
        case Phase::weight_grad:
            return QColor(0x9a, 0xcb, 0x7a);
        case Phase::none:
            break;
    }
    return QColor(0x88, 0x88, 0x88);
}

QColor bubble() {
    return QColor(0xe4, 0x57, 0x56);
}
QColor theory() {
    return QColor(0x33, 0x33, 0x33);
}
QColor predicted() {
    return QColor(0xf5, 0x85, 0x18);
}
QColor measured() {
    return QColor(0x4c, 0x78, 0xa8);
}
QColor highlight() {
    return QColor(0xff, 0xd7, 0x00);
}
QColor critical() {
    return QColor(0xc0, 0x10, 0x30);
}

QColor run(int index) {
    static const std::array<QColor, 6> colours = {
        QColor(0x4c, 0x78, 0xa8), QColor(0xf5, 0x85, 0x18), QColor(0x54, 0xa2, 0x4b),
        QColor(0xe4, 0x57, 0x56), QColor(0x8e, 0x5e, 0xa8), QColor(0x9d, 0x75, 0x5d)};
    return colours[static_cast<std::size_t>(index) % colours.size()];
}

QColor faster() {
    return QColor(0x2b, 0x6c, 0xb0);
}
QColor slower() {
    return QColor(0xc0, 0x39, 0x2b);
}
QColor ink() {
    return QColor(0x20, 0x20, 0x20);
}
QColor faint_ink() {
    return QColor(0x70, 0x70, 0x70);
}
QColor axis_ink() {
    return QColor(0x40, 0x40, 0x40);
}
QColor band(bool group) {
    return group ? QColor(0xe6, 0xe9, 0xef) : QColor(0xf3, 0xf4, 0xf7);
}
QColor gutter(int level) {
    return level == 0   ? QColor(0xdc, 0xe0, 0xe8)
           : level == 1 ? QColor(0xea, 0xec, 0xf1)
                        : QColor(0xf7, 0xf8, 0xfa);
}
QColor rule() {
    return QColor(0xdd, 0xdf, 0xe4);
}
QColor gutter_rule() {
    return QColor(0xc8, 0xcc, 0xd4);
}
QColor frame() {
    return QColor(0xb0, 0xb4, 0xbc);
}
QColor surface() {
    return QColor(0xf3, 0xf4, 0xf7);
}
QColor search_hit() {
    return QColor(0x30, 0x90, 0xff);
}
QColor selection_shade() {
    return QColor(0x40, 0x40, 0x40, 40);
}
QColor switch_shade() {
    return QColor(0xe0, 0x80, 0x00, 60);
}
QColor label_background() {
    return QColor(0x20, 0x20, 0x20, 200);
}

}  // namespace fulcrum::views::palette
