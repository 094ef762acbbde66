#include "views/common/palette.h"

#include <array>

namespace fulcrum::views::palette {

QColor category(Category category) {
    // Compute in blues, attention in violet, communication in orange, copies in green: the
    // groups a reader looks for in a timeline stand apart, the containers stay pale.
    switch (category) {
        case Category::compute: return QColor(0x4c, 0x78, 0xa8);
        case Category::attention: return QColor(0x8e, 0x5e, 0xa8);
        case Category::communication: return QColor(0xf5, 0x85, 0x18);
        case Category::offload: return QColor(0x54, 0xa2, 0x4b);
        case Category::optimizer: return QColor(0xb2, 0x79, 0xa2);
        case Category::memory: return QColor(0x9d, 0x75, 0x5d);
        case Category::runtime: return QColor(0xba, 0xb0, 0xac);
        case Category::schedule: return QColor(0xd8, 0xdc, 0xe6);
        case Category::other: break;
    }
    return QColor(0x88, 0x88, 0x88);
}

QColor phase(Phase phase) {
    switch (phase) {
        case Phase::forward: return QColor(0x4c, 0x78, 0xa8);
        case Phase::backward: return QColor(0x72, 0xb7, 0xb2);
        case Phase::weight_grad: return QColor(0x9a, 0xcb, 0x7a);
        case Phase::none: break;
    }
    return QColor(0x88, 0x88, 0x88);
}

QColor bubble() { return QColor(0xe4, 0x57, 0x56); }
QColor theory() { return QColor(0x33, 0x33, 0x33); }
QColor predicted() { return QColor(0xf5, 0x85, 0x18); }
QColor measured() { return QColor(0x4c, 0x78, 0xa8); }
QColor highlight() { return QColor(0xff, 0xd7, 0x00); }
QColor critical() { return QColor(0xc0, 0x10, 0x30); }

QColor run(int index) {
    static const std::array<QColor, 6> colours = {
        QColor(0x4c, 0x78, 0xa8), QColor(0xf5, 0x85, 0x18), QColor(0x54, 0xa2, 0x4b),
        QColor(0xe4, 0x57, 0x56), QColor(0x8e, 0x5e, 0xa8), QColor(0x9d, 0x75, 0x5d)};
    return colours[static_cast<std::size_t>(index) % colours.size()];
}

}  // namespace fulcrum::views::palette
