import FoundationEssentials

/// The diff of a manifest against what is active: the set to switch to, what must be fetched for it,
/// and what gating held back. An unchanged package costs nothing, not even a request.
package struct ReleasePlan: Sendable {
    /// The packages of the new active set, in manifest order.
    package var packages: [InstalledPackage]
    /// Packages of the new set whose trees are not on disk yet.
    package var toInstall: [PackageEntry]
    package var heldBack: [HeldBackRelease]
}

package struct ReleasePlanner {
    package var layout: CacheLayout
    package var shellVersion: ShellVersion?
    package var deviceID: String
    /// Releases reverted (by hand, or for want of a launch confirmation): `id` → version never to
    /// take again.
    package var reverted: [String: String] = [:]
    /// Of `reverted`, those `rollback` left by hand: only what the hold-back says differs.
    package var rolledBack: [String: String] = [:]

    package func plan(_ manifest: Manifest, current: ActiveSet) -> ReleasePlan {
        var plan = ReleasePlan(packages: [], toInstall: [], heldBack: [])
        var kept = [(index: Int, package: InstalledPackage)]()
        for entry in manifest.packages {
            if let reason = holdReason(entry) {
                plan.heldBack.append(.init(id: entry.id, version: entry.version, reason: reason))
                // A held-back package keeps what the device has of it, if anything.
                if let old = current.package(entry.id) { kept.append((plan.heldBack.count - 1, old)) }
                continue
            }
            plan.packages.append(InstalledPackage(entry))
            if !isInstalled(entry) { plan.toInstall.append(entry) }
        }
        // A kept old version may still list a route that this manifest gives to another package; two
        // packages may never answer one prefix, and the manifest's assignment wins.
        var owners = [String: String]()
        for package in plan.packages {
            for route in package.routes { owners[RouteKey.owningKey(route)] = package.id }
        }
        for (index, old) in kept {
            if let clash = old.routes.first(where: { owners[RouteKey.owningKey($0)] != nil }) {
                let owner = owners[RouteKey.owningKey(clash)]!
                plan.heldBack[index].reason +=
                    "; \(old.id) \(old.version) is not kept either: its route \(clash) now belongs to \(owner)"
                continue
            }
            plan.packages.append(old)
            for route in old.routes { owners[RouteKey.owningKey(route)] = old.id }
        }
        return plan
    }

    package func isInstalled(_ entry: PackageEntry) -> Bool {
        FileSystem.isDirectory(layout.tree(id: entry.id, version: entry.version, treeHash: entry.tree))
            && FileSystem.exists(layout.treeIndex(id: entry.id, version: entry.version, treeHash: entry.tree))
    }

    private func holdReason(_ entry: PackageEntry) -> String? {
        if entry.disabled {
            return "disabled by the publisher: devices keep what they have of \(entry.id)"
        }
        if let required = entry.minShellVersion.flatMap(ShellVersion.init), let shellVersion, shellVersion < required {
            return "needs shell \(required), this shell is \(shellVersion)"
        }
        if let newest = entry.maxShellVersion.flatMap(ShellVersion.init), let shellVersion, !shellVersion.isWithin(newest) {
            return "needs shell \(newest) or older, this shell is \(shellVersion)"
        }
        if let rollout = entry.rollout {
            let bucket = Rollout.bucket(deviceID: deviceID, packageID: entry.id, version: entry.version)
            if bucket >= rollout { return "rollout \(rollout)%: this device's bucket is \(bucket)" }
        }
        if reverted[entry.id] == entry.version {
            if rolledBack[entry.id] == entry.version {
                return "rolled back by hand (offlinepkg rollback): taken again only when the manifest offers another version"
            }
            return "reverted: this release was never confirmed to launch"
        }
        return nil
    }
}
