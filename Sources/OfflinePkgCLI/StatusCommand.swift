import FoundationEssentials
import OfflinePkg

enum StatusCommand {
    static let spec = CommandSpec(
        name: "status", arguments: [], options: [.root, .json],
        summary: "show the active set, the previous one, history and what was held back", run: run)

    static func run(_ arguments: ParsedArguments, _ context: CLIContext) async throws -> Int32 {
        let store = try context.openStore(arguments)
        let status = try store.status()
        if arguments.flag("json") {
            context.output.json(status)
            return OfflinePkgCommand.ExitStatus.success
        }
        var lines = ["root: \(status.root)"]
        if status.active.generation == 0 {
            lines.append("active: nothing installed yet")
        } else {
            lines.append(
                "active: set \(status.active.generation) (sequence \(status.active.sequence), since \(RFC3339.format(status.active.activatedAt)))"
            )
            for package in status.active.packages {
                lines.append(
                    "  \(package.id) \(package.version)\(package.mandatory == true ? " (mandatory)" : "")  \(package.routes.joined(separator: " "))"
                )
                if let notes = package.notes { lines.append("    notes: \(notes)") }
            }
        }
        if let previous = status.previous, previous.generation > 0 {
            lines.append(
                "previous: set \(previous.generation): "
                    + previous.packages.map { "\($0.id) \($0.version)" }.joined(separator: ", "))
        }
        if let url = status.manifestURL { lines.append("manifest: \(url)") }
        for trust in status.trust {
            lines += TrustText.lines(trust).enumerated().map { index, line in (index == 0 ? "trust: " : "") + line }
        }
        if let tls = status.tls { lines.append("tls: \(tls.certificate) (spki sha256 \(tls.spkiSHA256))") }
        if let content = status.content, content.files > 0 {
            lines.append("content: \(content.files) file(s), \(content.bytes) bytes")
        }
        if let check = status.lastCheck { lines.append("last check: \(RFC3339.format(check))") }
        if let attempt = status.lastAttempt { lines.append("last attempt: \(RFC3339.format(attempt))") }
        if let success = status.lastSuccess { lines.append("last success: \(RFC3339.format(success))") }
        if let changes = status.lastSync, !changes.isEmpty {
            lines.append(
                "last sync: "
                    + changes.map {
                        "\($0.id) \($0.to ?? "removed")\($0.via.map { " via \($0)" } ?? "")\($0.bytes.map { ", \(ProgressReporter.format($0))" } ?? "")"
                    }
                    .joined(separator: "; "))
        }
        if let reports = status.reports {
            var line = "reports: \(reports.events) event(s) queued, \(reports.bytes) bytes, for \(reports.url ?? "nowhere (reports off)")"
            if let sent = reports.lastSent { line += "; last sent \(RFC3339.format(sent))" }
            if let failure = reports.lastFailure { line += "; last send failed \(RFC3339.format(failure.time)): \(failure.message)" }
            lines.append(line)
        }
        if status.consecutiveFailures > 0 { lines.append("consecutive failures: \(status.consecutiveFailures)") }
        if let error = status.lastError {
            lines.append("last error: \(RFC3339.format(error.time)) exit \(error.exitStatus): \(error.message)")
        }
        for held in status.heldBack { lines.append("held back: \(held.id) \(held.version): \(held.reason)") }
        for (id, version) in status.reverted.sorted(by: { $0.key < $1.key }) { lines.append("reverted: \(id) \(version)") }
        if status.history.count > 1 {
            lines.append("history:")
            // The newest twenty on a terminal; `--json` has them all.
            for set in status.history.suffix(20).reversed() {
                lines.append(
                    "  set \(set.generation) at \(RFC3339.format(set.activatedAt)): "
                        + set.packages.map { "\($0.id) \($0.version)" }.joined(separator: ", "))
            }
        }
        if let problem = status.historyProblem { lines.append("history: \(problem)") }
        context.output.print(lines.joined(separator: "\n"))
        return OfflinePkgCommand.ExitStatus.success
    }
}
