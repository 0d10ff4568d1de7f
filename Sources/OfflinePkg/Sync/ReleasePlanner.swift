import Foundation

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
    /// Releases reverted for want of a launch confirmation: `id` → version never to take again.
    package var reverted: [String: String] = [:]

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
            for route in package.routes { owners[RouteKey.normalized(route) ?? route] = package.id }
        }
        for (index, old) in kept {
            if let clash = old.routes.first(where: { owners[RouteKey.normalized($0) ?? $0] != nil }) {
                let owner = owners[RouteKey.normalized(clash) ?? clash]!
                plan.heldBack[index].reason +=
                    "; \(old.id) \(old.version) is not kept either: its route \(clash) now belongs to \(owner)"
                continue
            }
            plan.packages.append(old)
            for route in old.routes { owners[RouteKey.normalized(route) ?? route] = old.id }
        }
        return plan
    }

    package func isInstalled(_ entry: PackageEntry) -> Bool {
        FileSystem.isDirectory(layout.tree(id: entry.id, version: entry.version, treeHash: entry.tree))
            && FileSystem.exists(layout.treeIndex(id: entry.id, version: entry.version, treeHash: entry.tree))
    }

    private func holdReason(_ entry: PackageEntry) -> String? {
        if let required = entry.minShellVersion.flatMap(ShellVersion.init), let shellVersion, shellVersion < required {
            return "needs shell \(required), this shell is \(shellVersion)"
        }
        if let rollout = entry.rollout {
            let bucket = Rollout.bucket(deviceID: deviceID, packageID: entry.id, version: entry.version)
            if bucket >= rollout { return "rollout \(rollout)%: this device's bucket is \(bucket)" }
        }
        if reverted[entry.id] == entry.version {
            return "reverted: this release was never confirmed to launch"
        }
        return nil
    }
}

/// The rollout bucket of SPEC §2: the first 4 bytes of sha256("<device>:<id>:<version>"), big-endian,
/// mod 100.
public enum Rollout {
    public static func bucket(deviceID: String, packageID: String, version: String) -> Int {
        let digest = SHA256.hash(Array("\(deviceID):\(packageID):\(version)".utf8)).bytes
        let value = UInt32(digest[0]) << 24 | UInt32(digest[1]) << 16 | UInt32(digest[2]) << 8 | UInt32(digest[3])
        return Int(value % 100)
    }

    /// The device ID of a cache root: a random UUID made once and kept in `device-id`.
    package static func deviceID(_ layout: CacheLayout) throws -> String {
        if let existing = existingDeviceID(layout) { return existing }
        let id = UUID().uuidString.lowercased()
        try FileSystem.writeAtomically(Array((id + "\n").utf8), to: layout.deviceID)
        return id
    }

    /// The device ID if the root has one already; nil rather than making one.
    package static func existingDeviceID(_ layout: CacheLayout) -> String? {
        guard let bytes = try? FileSystem.read(layout.deviceID, limit: 1024) else { return nil }
        let text = String(decoding: bytes, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        return text.isEmpty ? nil : text
    }
}
