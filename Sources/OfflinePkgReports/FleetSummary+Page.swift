import FoundationEssentials

extension FleetSummary {
    /// `reports show --html`: one page that stands alone — inline CSS and SVG, no script, no font or
    /// image from anywhere — with, per package, adoption of each version over time, devices per version
    /// now, failure and revert rates with the commonest errors, and the bytes each way cost.
    package var page: String {
        var html = """
            <!doctype html>
            <html lang="en"><head><meta charset="utf-8">
            <meta name="viewport" content="width=device-width, initial-scale=1">
            <title>offlinepkg install reports</title>
            <style>
            body { font-family: sans-serif; margin: 24px; color: #222; max-width: 1000px; }
            h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 32px; border-bottom: 1px solid #ccc; }
            table { border-collapse: collapse; margin: 8px 0 16px; } td, th { padding: 3px 10px; text-align: right; white-space: nowrap; }
            th { background: #f0f0f0; } td:first-child, th:first-child { text-align: left; }
            .bad { color: #b00020; font-weight: bold; } .note { color: #555; font-size: 13px; }
            svg { display: block; margin: 8px 0 16px; }
            </style></head><body>
            <h1>Install reports</h1>
            <p class="note">\(devices) device(s), \(events) event(s). Counts over the last \(days) day(s), since \(SVGChart.escape(since)); generated \(SVGChart.escape(generatedAt)). Devices: on the version now (their last event).</p>

            """
        if packages.isEmpty { html += "<p>No package has been reported yet.</p>\n" }
        for package in packages { html += section(package) }
        if !errors.isEmpty {
            html += "<h2>Failed syncs that named no package</h2>\n<table><tr><th>count</th><th>error</th></tr>\n"
            for error in errors {
                html += "<tr><td>\(error.count)</td><td style=\"text-align:left\">\(SVGChart.escape(error.error))</td></tr>\n"
            }
            html += "</table>\n"
        }
        return html + "</body></html>\n"
    }

    private func section(_ package: PackageSummary) -> String {
        let colours = Dictionary(
            uniqueKeysWithValues: package.versions.enumerated().map { ($0.element.version, SVGChart.colour($0.offset)) })
        var html = "<h2 id=\"package-\(SVGChart.escape(package.id))\">\(SVGChart.escape(package.id))</h2>\n"
        // Adoption over time.
        let points = package.adoption.points
        let shown = package.versions.filter { version in points.contains { ($0.devices[version.version] ?? 0) > 0 } }
        if !points.isEmpty && !shown.isEmpty {
            html +=
                SVGChart.lines(
                    title: "Adoption: devices on each version over time",
                    series: shown.map { version in
                        (version.version, colours[version.version]!, points.map { Double($0.devices[version.version] ?? 0) })
                    },
                    labels: points.map { Self.label($0.time, step: package.adoption.step) }) + "\n"
        }
        // Devices now.
        html +=
            SVGChart.bars(
                title: "Devices per version now",
                rows: package.versions.map { version in
                    (version.version, [(Double(version.devices), colours[version.version]!)], "\(version.devices)")
                }) + "\n"
        // Failure and revert rates.
        let tried = package.versions.filter { $0.failureRate != nil || $0.revertRate != nil }
        if !tried.isEmpty {
            html +=
                SVGChart.bars(
                    title: "Failure and revert rates",
                    rows: tried.flatMap { version in
                        [
                            (
                                "\(version.version) failed", [((version.failureRate ?? 0) * 100, "#d62728")],
                                Self.percent(version.failureRate)
                            ),
                            (
                                "\(version.version) reverted", [((version.revertRate ?? 0) * 100, "#ff7f0e")],
                                Self.percent(version.revertRate)
                            ),
                        ]
                    }, maximum: 100) + "\n"
        }
        // Bytes by way.
        let fetched = package.versions.filter { $0.bytes.files + $0.bytes.delta + $0.bytes.archive > 0 }
        if !fetched.isEmpty {
            let ways: [(name: String, colour: String)] = [("files", "#2ca02c"), ("delta", "#1f77b4"), ("archive", "#9467bd")]
            html +=
                SVGChart.bars(
                    title: "Bytes fetched by way",
                    rows: fetched.map { version in
                        let values = [version.bytes.files, version.bytes.delta, version.bytes.archive]
                        return (
                            version.version, zip(values, ways).map { (Double($0), $1.colour) },
                            Self.bytes(values.reduce(0, +))
                        )
                    }, legend: ways) + "\n"
        }
        html += table(package)
        return html
    }

    private func table(_ package: PackageSummary) -> String {
        var html =
            "<table>\n<tr><th>version</th><th>devices now</th><th>activated</th><th>failed</th><th>reverted</th>"
            + "<th>confirmed</th><th>failure rate</th><th>revert rate</th><th>files</th><th>delta</th><th>archive</th></tr>\n"
        for version in package.versions {
            let cells = [
                "\(version.devices)", "\(version.activated)", "\(version.failed)", "\(version.reverted)", "\(version.confirmed)",
            ]
            let failure = (version.failureRate ?? 0) > 0 ? " class=\"bad\"" : ""
            let revert = (version.revertRate ?? 0) > 0 ? " class=\"bad\"" : ""
            html +=
                "<tr><td>\(SVGChart.escape(version.version))</td>" + cells.map { "<td>\($0)</td>" }.joined()
                + "<td\(failure)>\(Self.percent(version.failureRate))</td><td\(revert)>\(Self.percent(version.revertRate))</td>"
                + [version.bytes.files, version.bytes.delta, version.bytes.archive].map { "<td>\(Self.bytes($0))</td>" }.joined()
                + "</tr>\n"
        }
        html += "</table>\n"
        for version in package.versions where !version.errors.isEmpty {
            html += "<p>Commonest errors of \(SVGChart.escape(package.id)) \(SVGChart.escape(version.version)):</p>\n<ul>\n"
            for error in version.errors { html += "<li>\(error.count)× <code>\(SVGChart.escape(error.error))</code></li>\n" }
            html += "</ul>\n"
        }
        return html
    }

    /// An axis label for a point's time: the day for daily steps, the time of day (to the second for
    /// steps under a minute) otherwise.
    static func label(_ time: String, step: Int) -> String {
        let characters = Array(time)
        guard characters.count >= 19 else { return time }
        if step >= 86_400 { return String(characters[0..<10]) }
        return String(characters[5..<10]) + " " + String(characters[11..<(step < 60 ? 19 : 16)])
    }
}
