import FoundationEssentials
import OfflinePkg

enum VerifyCommand {
    static let spec = CommandSpec(
        name: "verify", arguments: [],
        options: [
            .root, .init(name: "repair", value: nil, help: "fetch damaged packages again from the last manifest"), .wait,
            .json,
        ],
        summary: "re-hash the active trees; exit 4 naming each damaged file", run: run)

    static func run(_ arguments: ParsedArguments, _ context: CLIContext) async throws -> Int32 {
        let root = try context.openRoot(arguments)
        let damage = try root.verify()
        if arguments.flag("json") {
            context.output.json(["damaged": damage])
        } else if damage.isEmpty {
            context.output.print("ok: \(try root.activeRecord().current.packages.count) active package(s) match their tree hashes")
        }
        for item in damage { context.output.error("damaged: " + describe(item)) }
        if arguments.flag("repair") && !damage.isEmpty {
            var options = Updater.Options(waitForLock: arguments.flag("wait"))
            options.events = { event in
                if case .waitingForLock(let root) = event { context.output.info(RootWait.message(root)) }
            }
            let repairer = TreeRepairer(root: root, options: options)
            let repaired = try await repairer.repair(damage)
            let remaining = try root.verify()
            for id in repaired { context.output.info("repaired: \(id)") }
            return remaining.isEmpty ? OfflinePkgCommand.ExitStatus.success : OfflinePkgCommand.ExitStatus.refused
        }
        if !damage.isEmpty && !arguments.flag("json") {
            context.output.error("run offlinepkg verify --repair to fetch the damaged files again (the active set stays as it is)")
        }
        return damage.isEmpty ? OfflinePkgCommand.ExitStatus.success : OfflinePkgCommand.ExitStatus.refused
    }

    /// One damaged item as a line: a package's file, its index, a held content file or a runtime entry.
    static func describe(_ item: TreeDamage) -> String {
        switch item.packageID {
        case TreeDamage.contentStore: "held content \(item.path): \(item.problem)"
        case TreeDamage.runtimeCache: "runtime cache \(item.path): \(item.problem)"
        default: "\(item.packageID) \(item.version): \(item.path.isEmpty ? "(index)" : item.path): \(item.problem)"
        }
    }
}

enum GCCommand {
    static let spec = CommandSpec(
        name: "gc", arguments: [], options: [.root, .wait, .json],
        summary: "remove trees that neither the active nor the previous set needs and no reader leases",
        run: run)

    static func run(_ arguments: ParsedArguments, _ context: CLIContext) async throws -> Int32 {
        let root = try context.openRoot(arguments)
        let removed = try root.collectGarbage(wait: arguments.flag("wait"), waiting: RootWait.say(context, root))
        if arguments.flag("json") {
            context.output.json(["removed": removed])
        } else {
            context.output.print(removed.isEmpty ? "nothing to remove" : removed.map { "removed \($0)" }.joined(separator: "\n"))
        }
        return OfflinePkgCommand.ExitStatus.success
    }
}

enum RollbackCommand {
    static let spec = CommandSpec(
        name: "rollback", arguments: [], options: [.root, .wait, .json],
        summary: "switch back to the previous active set", run: run)

    static func run(_ arguments: ParsedArguments, _ context: CLIContext) async throws -> Int32 {
        let root = try context.openRoot(arguments)
        let set = try root.rollback(wait: arguments.flag("wait"), waiting: RootWait.say(context, root))
        if arguments.flag("json") {
            context.output.json(set)
        } else {
            context.output.print(
                "active: set \(set.generation): " + set.packages.map { "\($0.id) \($0.version)" }.joined(separator: ", "))
        }
        return OfflinePkgCommand.ExitStatus.success
    }
}

/// What `--wait` says while another process holds the root's lock.
enum RootWait {
    static func message(_ root: String) -> String { "waiting for another sync of \(root) to finish (--wait)" }

    static func say(_ context: CLIContext, _ root: CacheRoot) -> () -> Void {
        { context.output.info(message(root.layout.root)) }
    }
}
