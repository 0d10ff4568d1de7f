import FoundationEssentials
import OfflinePkg

#if canImport(Glibc)
import Glibc
#endif

/// The inline SVG charts of the `reports show --html` page: drawn here as text, sized in pixels, no
/// script, no font but the reader's own sans-serif.
enum SVGChart {
    /// Colours for series, in order (enough contrast on white; repeated past the end).
    static let palette = [
        "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
    ]

    static func colour(_ index: Int) -> String { palette[index % palette.count] }

    /// Lines over time: one per series, `values[s][p]` the value of series `s` at point `p`; `labels` names
    /// the points on the x axis (first, middle, last are written).
    static func lines(
        title: String, series: [(name: String, colour: String, values: [Double])], labels: [String], width: Int = 720,
        height: Int = 260
    ) -> String {
        let (left, right, top, bottom) = (48.0, 16.0, 28.0, 44.0)
        let plotWidth = Double(width) - left - right
        let plotHeight = Double(height) - top - bottom
        let count = max(1, labels.count)
        let maximum = max(1, series.flatMap(\.values).max() ?? 1)
        // Ticks at a round step (whole devices: at least 1), about five of them.
        let tick = max(1, niceCeiling(maximum / 5))
        let ticks = Int((maximum / tick).rounded(.up))
        let scale = tick * Double(ticks)
        func x(_ index: Int) -> Double { left + (count == 1 ? plotWidth / 2 : plotWidth * Double(index) / Double(count - 1)) }
        func y(_ value: Double) -> Double { top + plotHeight - plotHeight * value / scale }
        var svg = open(width: width, height: height, title: title)
        svg += text(x: left, y: 18, title, anchor: "start", weight: "bold")
        for step in 0...ticks {
            let value = tick * Double(step)
            let lineY = y(value)
            svg += "<line x1=\"\(f(left))\" y1=\"\(f(lineY))\" x2=\"\(f(left + plotWidth))\" y2=\"\(f(lineY))\" stroke=\"#ddd\"/>"
            svg += text(x: left - 6, y: lineY + 4, number(value), anchor: "end")
        }
        for index in Set([0, (count - 1) / 2, count - 1]).sorted() where index < labels.count {
            let anchor = index == 0 ? "start" : (index == count - 1 ? "end" : "middle")
            svg += text(x: x(index), y: top + plotHeight + 16, labels[index], anchor: anchor)
        }
        for line in series {
            let points = line.values.enumerated().map { "\(f(x($0.offset))),\(f(y($0.element)))" }.joined(separator: " ")
            if line.values.count == 1 {
                svg += "<circle cx=\"\(f(x(0)))\" cy=\"\(f(y(line.values[0])))\" r=\"4\" fill=\"\(line.colour)\"/>"
            } else {
                svg +=
                    "<polyline class=\"series\" fill=\"none\" stroke=\"\(line.colour)\" stroke-width=\"2.5\" points=\"\(points)\"/>"
            }
        }
        var legendX = left
        for line in series {
            svg +=
                "<rect x=\"\(f(legendX))\" y=\"\(f(Double(height) - 16))\" width=\"12\" height=\"12\" fill=\"\(line.colour)\"/>"
            svg += text(x: legendX + 16, y: Double(height) - 6, line.name, anchor: "start")
            legendX += 28 + Double(min(line.name.count, 24)) * 7
        }
        return svg + "</svg>"
    }

    /// Horizontal bars, one row per label, each row one or more stacked segments.
    static func bars(
        title: String, rows: [(label: String, segments: [(value: Double, colour: String)], caption: String)],
        legend: [(name: String, colour: String)] = [], width: Int = 720, maximum: Double? = nil
    ) -> String {
        let (left, right, top, rowHeight) = (150.0, 140.0, 28.0, 24.0)
        let height = Int(top + rowHeight * Double(max(1, rows.count)) + (legend.isEmpty ? 12 : 34))
        let plotWidth = Double(width) - left - right
        let scale = max(maximum ?? 0, rows.map { $0.segments.reduce(0) { $0 + $1.value } }.max() ?? 0, 1e-9)
        var svg = open(width: width, height: height, title: title)
        svg += text(x: 8, y: 18, title, anchor: "start", weight: "bold")
        for (index, row) in rows.enumerated() {
            let rowY = top + rowHeight * Double(index)
            svg += text(x: left - 8, y: rowY + 15, row.label, anchor: "end")
            var segmentX = left
            for segment in row.segments where segment.value > 0 {
                let segmentWidth = max(1, plotWidth * segment.value / scale)
                svg +=
                    "<rect class=\"bar\" x=\"\(f(segmentX))\" y=\"\(f(rowY + 3))\" width=\"\(f(segmentWidth))\" height=\"\(f(rowHeight - 8))\" fill=\"\(segment.colour)\"/>"
                segmentX += segmentWidth
            }
            svg += text(x: segmentX + 6, y: rowY + 15, row.caption, anchor: "start")
        }
        var legendX = left
        for item in legend {
            svg += "<rect x=\"\(f(legendX))\" y=\"\(height - 18)\" width=\"12\" height=\"12\" fill=\"\(item.colour)\"/>"
            svg += text(x: legendX + 16, y: Double(height - 8), item.name, anchor: "start")
            legendX += 28 + Double(item.name.count) * 7
        }
        return svg + "</svg>"
    }

    private static func open(width: Int, height: Int, title: String) -> String {
        "<svg xmlns=\"http://www.w3.org/2000/svg\" role=\"img\" aria-label=\"\(escape(title))\" width=\"\(width)\" height=\"\(height)\" viewBox=\"0 0 \(width) \(height)\">"
    }

    private static func text(x: Double, y: Double, _ content: String, anchor: String, weight: String = "normal") -> String {
        "<text x=\"\(f(x))\" y=\"\(f(y))\" text-anchor=\"\(anchor)\" font-size=\"12\" font-weight=\"\(weight)\" fill=\"#222\">\(escape(content))</text>"
    }

    /// A round number at or above `value` for the top of an axis (1, 2, 5 times a power of ten).
    static func niceCeiling(_ value: Double) -> Double {
        let power = pow(10, floor(log10(value)))
        for factor in [1.0, 2, 5, 10] where factor * power >= value { return factor * power }
        return 10 * power
    }

    static func number(_ value: Double) -> String {
        value == value.rounded() ? String(Int(value)) : TextFormat.fixed(value, places: 1)
    }

    static func f(_ value: Double) -> String { TextFormat.fixed(value, places: 1) }

    /// Text for HTML and SVG: `&`, `<`, `>` and quotes escaped.
    static func escape(_ text: String) -> String {
        var result = ""
        for character in text {
            switch character {
            case "&": result += "&amp;"
            case "<": result += "&lt;"
            case ">": result += "&gt;"
            case "\"": result += "&quot;"
            case "'": result += "&#39;"
            default: result.append(character)
            }
        }
        return result
    }
}
