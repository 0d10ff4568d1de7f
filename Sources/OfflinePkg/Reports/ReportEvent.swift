import FoundationEssentials

#if canImport(Glibc)
import Glibc
#endif

/// One install report (docs/protocol.md#install-reports): what a device did — an activation, a failed sync, a revert or a
/// launch confirmation — with exactly the fields docs/protocol.md#the-event lists and nothing else (no user data, no URL
/// query). A device writes these into its queue; a collector reads them back, from a POST or a log.
package struct ReportEvent: Sendable, Equatable {
    package enum Kind: String, Sendable, CaseIterable, Codable {
        /// A sync switched the active set.
        case activated
        /// A sync ended with a non-zero status; the active set is as it was.
        case failed
        /// The active set went back to the one before it: a launch never confirmed (`recordLaunch`), or
        /// `offlinepkg rollback`.
        case reverted
        /// The host confirmed that a newly activated set launched (`confirmLaunch`).
        case confirmed
    }

    /// One package the event is about.
    package struct Package: Sendable, Equatable {
        package var id: String
        /// The version before; nil when the device had none.
        package var from: String?
        /// The version after (for `failed`, the version that did not install); nil when removed.
        package var to: String?
        /// How the new tree arrived: `files`, `delta`, `archive`, `cache` (already on disk: every revert
        /// and confirmation); nil when the package was removed or did not install.
        package var via: String?
        /// What the package cost on the network in this event.
        package var bytes: Int64

        package init(id: String, from: String?, to: String?, via: String?, bytes: Int64) {
            self.id = id
            self.from = from
            self.to = to
            self.via = via
            self.bytes = bytes
        }
    }

    /// The root's random id (`device-id`), the same one rollout buckets use.
    package var device: String
    /// When it happened on the device, to the millisecond.
    package var time: Date
    package var event: Kind
    /// The manifest sequence the event is about (the set activated or confirmed, the release that
    /// failed, the set restored); nil when the sync failed before it had a manifest.
    package var sequence: Int?
    package var packages: [Package]
    /// The sync's exit status (docs/protocol.md#exit-statuses): 0 for an activation, nil for reverts and confirmations.
    package var exitStatus: Int32?
    /// The failure's message, with URL queries and the root's path taken out.
    package var error: String?
    /// How long the sync took; nil for reverts and confirmations.
    package var durationMs: Int?
    /// The shell's version as the sync was told it (`--shell-version`), nil when not given.
    package var shellVersion: String?
    /// The offlinepkg version of the device.
    package var offlinepkg: String

    package init(
        device: String, time: Date, event: Kind, sequence: Int?, packages: [Package], exitStatus: Int32? = nil,
        error: String? = nil, durationMs: Int? = nil, shellVersion: String? = nil,
        offlinepkg: String = OfflinePkgVersion.current
    ) {
        self.device = device
        self.time = time
        self.event = event
        self.sequence = sequence
        self.packages = packages
        self.exitStatus = exitStatus
        self.error = error
        self.durationMs = durationMs
        self.shellVersion = shellVersion
        self.offlinepkg = offlinepkg
    }

    /// The vias a package may name.
    package static let ways = ["files", "delta", "archive", "cache"]

    /// Errors longer than this (in bytes) are cut: a message, not a log.
    package static let maximumErrorBytes = 1024
    /// Packages one event may list: far above any manifest a shell ships, low enough that one event fits
    /// the device's queue.
    package static let maximumPackages = 1000

    /// The event as one line of JSON, keys in the protocol's order, every key present (null where it does not
    /// apply), no newline inside: the queue's record and the array's element.
    package var json: [UInt8] {
        var text = "{\"device\":" + JSONText.quoted(device)
        text += ",\"time\":" + JSONText.quoted(ReportTime.format(time))
        text += ",\"event\":" + JSONText.quoted(event.rawValue)
        text += ",\"sequence\":" + (sequence.map(String.init) ?? "null")
        text += ",\"packages\":["
        for (index, package) in packages.enumerated() {
            if index > 0 { text += "," }
            text += "{\"id\":" + JSONText.quoted(package.id)
            text += ",\"from\":" + JSONText.quoted(package.from)
            text += ",\"to\":" + JSONText.quoted(package.to)
            text += ",\"via\":" + JSONText.quoted(package.via)
            text += ",\"bytes\":" + String(package.bytes) + "}"
        }
        text += "],\"exitStatus\":" + (exitStatus.map { String($0) } ?? "null")
        text += ",\"error\":" + JSONText.quoted(error)
        text += ",\"durationMs\":" + (durationMs.map(String.init) ?? "null")
        text += ",\"shellVersion\":" + JSONText.quoted(shellVersion)
        text += ",\"offlinepkg\":" + JSONText.quoted(offlinepkg) + "}"
        return Array(text.utf8)
    }

    /// A failure's message as an event may carry it: the root's path (which may hold a user name) as
    /// `<root>`, every URL without its user, query or fragment, cut to `maximumErrorBytes`.
    package static func sanitized(_ message: String, root: String) -> String {
        var text = root.count > 1 ? message.replacing(root, with: "<root>") : message
        text = JSONText.withoutURLSecrets(text)
        guard text.utf8.count > maximumErrorBytes else { return text }
        var cut = ""
        for character in text {
            if cut.utf8.count + character.utf8.count > maximumErrorBytes - 3 { break }
            cut.append(character)
        }
        return cut + "..."
    }
}

/// Event times: RFC 3339 in UTC to the millisecond (`2026-05-01T10:00:00.123Z`), written and read
/// without Foundation's ICU formatters (a collector reads thousands a second).
package enum ReportTime {
    package static func format(_ date: Date) -> String {
        let milliseconds = Int64((date.timeIntervalSince1970 * 1000).rounded(.down))
        var seconds = time_t(milliseconds / 1000)
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        let fraction = String(1000 + milliseconds % 1000).dropFirst()
        return "\(parts.tm_year + 1900)-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday))T"
            + "\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec)).\(fraction)Z"
    }

    /// Milliseconds since 1970 of an RFC 3339 time: the form `format` writes read directly, any other
    /// (an offset, another precision) through Foundation.
    package static func milliseconds(_ text: String) -> Int64? {
        let bytes = Array(text.utf8)
        if bytes.count >= 20, bytes.last == UInt8(ascii: "Z") {
            let whole = Array(bytes.prefix(19)) + [UInt8(ascii: "Z")]
            var fraction: Int64 = 0
            if bytes.count > 20 {
                let digits = bytes[20..<(bytes.count - 1)]
                guard bytes[19] == UInt8(ascii: "."), !digits.isEmpty, digits.count <= 9,
                    digits.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) })
                else { return fallback(text) }
                for (index, digit) in digits.prefix(3).enumerated() {
                    fraction += Int64(digit - UInt8(ascii: "0")) * [100, 10, 1][index]
                }
            } else if bytes.count != 20 {
                return fallback(text)
            }
            if let date = InternetDate.parse(String(decoding: whole, as: UTF8.self)) {
                return Int64(date.timeIntervalSince1970) * 1000 + fraction
            }
        }
        return fallback(text)
    }

    private static func fallback(_ text: String) -> Int64? {
        RFC3339.parse(text).map { Int64(($0.timeIntervalSince1970 * 1000).rounded(.down)) }
    }
}

/// The few JSON-text helpers the reports need.
package enum JSONText {
    /// `text` as a JSON string literal: quotes, backslashes and control characters escaped, the rest
    /// as UTF-8; `null` for nil.
    package static func quoted(_ text: String?) -> String {
        guard let text else { return "null" }
        var result = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": result += "\\\""
            case "\\": result += "\\\\"
            case "\n": result += "\\n"
            case "\r": result += "\\r"
            case "\t": result += "\\t"
            default:
                if scalar.value < 0x20 || scalar.value == 0x7f || scalar.value == 0x2028 || scalar.value == 0x2029 {
                    result +=
                        "\\u" + String(repeating: "0", count: 4 - String(scalar.value, radix: 16).count)
                        + String(scalar.value, radix: 16)
                } else {
                    result.unicodeScalars.append(scalar)
                }
            }
        }
        return result + "\""
    }

    /// `text` with each `scheme://` URL's user, query and fragment removed: a signed URL's token, a
    /// password in the user part, must never leave the device in a report.
    package static func withoutURLSecrets(_ text: String) -> String {
        guard text.contains("://") else { return text }
        var result = ""
        var rest = Substring(text)
        while let marker = rest.firstRange(of: "://") {
            // The URL runs from its scheme (letters before "://") to the next space or quote.
            var start = marker.lowerBound
            while start > rest.startIndex, rest[rest.index(before: start)].isLetter { start = rest.index(before: start) }
            result += rest[..<start]
            let end = rest[marker.upperBound...].firstIndex { " \t\n\"'<>".contains($0) } ?? rest.endIndex
            var authorityAndPath = rest[marker.upperBound..<end]
            let pathStart = authorityAndPath.firstIndex { "/?#".contains($0) } ?? authorityAndPath.endIndex
            if let at = authorityAndPath[..<pathStart].lastIndex(of: "@") {
                authorityAndPath = authorityAndPath[authorityAndPath.index(after: at)...]
            }
            let secretStart = authorityAndPath.firstIndex { "?#".contains($0) } ?? authorityAndPath.endIndex
            result += rest[start..<marker.upperBound] + authorityAndPath[..<secretStart]
            rest = rest[end...]
        }
        return result + rest
    }
}

extension ReportEvent {
    /// The packages that differ between two active sets, as an event lists them: every tree of `to` is
    /// on disk already (`via` "cache", no bytes), as for a revert or a confirmation.
    package static func packages(from old: ActiveSet, to new: ActiveSet) -> [Package] {
        var packages = [Package]()
        for package in new.packages {
            let before = old.package(package.id)
            if before?.version != package.version || before?.tree != package.tree {
                packages.append(Package(id: package.id, from: before?.version, to: package.version, via: "cache", bytes: 0))
            }
        }
        for package in old.packages where new.package(package.id) == nil {
            packages.append(Package(id: package.id, from: package.version, to: nil, via: nil, bytes: 0))
        }
        return packages
    }
}
