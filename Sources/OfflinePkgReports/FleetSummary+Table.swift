import FoundationEssentials
import OfflinePkg

extension FleetSummary {
    /// `reports show` on a terminal: per package a table of its versions, then the commonest errors.
    package var table: String {
        var lines = [
            "\(devices) device(s), \(events) event(s); counts over the last \(days) day(s) (since \(since)); devices: on the version now"
        ]
        if packages.isEmpty { lines.append("no package reported yet") }
        let header = [
            "version", "devices", "activated", "failed", "reverted", "confirmed", "fail %", "revert %", "files", "delta",
            "archive",
        ]
        for package in packages {
            lines.append("")
            lines.append(package.id)
            var rows = [header]
            for version in package.versions {
                rows.append([
                    version.version, "\(version.devices)", "\(version.activated)", "\(version.failed)", "\(version.reverted)",
                    "\(version.confirmed)", Self.percent(version.failureRate), Self.percent(version.revertRate),
                    Self.bytes(version.bytes.files), Self.bytes(version.bytes.delta), Self.bytes(version.bytes.archive),
                ])
            }
            lines += Self.aligned(rows).map { "  " + $0 }
            for version in package.versions where !version.errors.isEmpty {
                lines.append("  commonest errors of \(package.id) \(version.version):")
                for error in version.errors { lines.append("    \(error.count)x \(error.error)") }
            }
        }
        if !errors.isEmpty {
            lines.append("")
            lines.append("failed syncs that named no package:")
            for error in errors { lines.append("  \(error.count)x \(error.error)") }
        }
        return lines.joined(separator: "\n")
    }

    /// Columns padded to their widest cell: text left, numbers right.
    static func aligned(_ rows: [[String]]) -> [String] {
        guard let count = rows.first?.count else { return [] }
        let widths = (0..<count).map { column in rows.map { $0[column].count }.max() ?? 0 }
        return rows.map { row in
            row.enumerated().map { column, cell in
                let padding = String(repeating: " ", count: widths[column] - cell.count)
                return column == 0 ? cell + padding : padding + cell
            }.joined(separator: "  ")
        }
    }

    static func percent(_ rate: Double?) -> String {
        guard let rate else { return "-" }
        return TextFormat.fixed(rate * 100, places: 1) + "%"
    }

    static func bytes(_ count: Int64) -> String { ByteCount.text(count) }
}
