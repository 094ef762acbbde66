// Reading a rendered view's pixels in the views' tests.
#pragma once

#include <QColor>
#include <QImage>
#include <QRect>

// Pixels of `box` (clipped to the image) whose colour is exactly `colour`.
inline int count_colour(const QImage& image, const QRect& box, const QColor& colour) {
    int n = 0;
    const QRect clipped = box.intersected(image.rect());
    for (int y = clipped.top(); y <= clipped.bottom(); ++y) {
        for (int x = clipped.left(); x <= clipped.right(); ++x) {
            n += image.pixelColor(x, y).rgb() == colour.rgb();
        }
    }
    return n;
}
