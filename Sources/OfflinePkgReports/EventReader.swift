import FoundationEssentials
import OfflinePkg

/// Reads install reports as devices send them (docs/protocol.md#install-reports): a POST body (a JSON array of event objects)
/// or a line of a log (one object, or one array). Every value is checked; the first one that breaks a
/// rule is named with its path (`events[3].packages[0].via`) and what was expected. Fields this build
/// does not know are ignored, as a manifest's are.
package enum EventReader {
    /// Why a body or line was refused: where, and what is wrong.
    package struct Problem: Error, CustomStringConvertible, Sendable, Equatable {
        package var path: String
        package var reason: String
        package var description: String { path.isEmpty ? reason : "\(path): \(reason)" }
    }

    /// Events one body may carry: a device's queue holds at most 200.
    package static let maximumEvents = 10_000

    /// The events of a POST body or a log line: an array of events (named `events[i]` in a problem), or
    /// one event (`event`).
    package static func events(_ bytes: [UInt8], path: String = "events") throws(Problem) -> [ReportEvent] {
        let document: JSONDocument
        do {
            document = try JSONDocument(parsing: bytes)
        } catch {
            let inner = error.path.isEmpty ? path : (error.path.hasPrefix("[") ? path + error.path : path + "." + error.path)
            throw Problem(path: inner, reason: "not valid JSON: \(error.reason)")
        }
        let root = document.root
        if root.object != nil { return [try event(root, at: "event")] }
        guard let list = root.array else {
            throw Problem(path: path, reason: "expected a JSON array of event objects, got \(describe(root))")
        }
        guard list.count <= maximumEvents else {
            throw Problem(path: path, reason: "\(list.count) events; at most \(maximumEvents) are taken at once")
        }
        var events = [ReportEvent]()
        events.reserveCapacity(list.count)
        for (index, item) in list.enumerated() { events.append(try event(item, at: "\(path)[\(index)]")) }
        return events
    }

    /// One event object.
    package static func event(_ value: JSONValue, at path: String) throws(Problem) -> ReportEvent {
        guard let object = value.object else {
            throw Problem(path: path, reason: "expected an event object, got \(describe(value))")
        }
        func field(_ name: String) -> JSONValue? { object[name].flatMap { $0.isNull ? nil : $0 } }
        func text(_ name: String, required: Bool, limit: Int) throws(Problem) -> String? {
            guard let value = field(name) else {
                if required { throw Problem(path: "\(path).\(name)", reason: "missing") }
                return nil
            }
            guard let string = value.string else {
                throw Problem(path: "\(path).\(name)", reason: "expected a string, got \(describe(value))")
            }
            guard string.utf8.count <= limit else {
                throw Problem(path: "\(path).\(name)", reason: "longer than \(limit) bytes")
            }
            return string
        }
        func integer(_ name: String, at field: JSONValue?, _ path: String, range: ClosedRange<Int64>) throws(Problem) -> Int64? {
            guard let value = field else { return nil }
            guard let (literal, isInteger) = value.number, isInteger, let number = Int64(literal) else {
                throw Problem(path: path, reason: "expected a whole number, got \(describe(value))")
            }
            guard range.contains(number) else {
                throw Problem(path: path, reason: "must be from \(range.lowerBound) to \(range.upperBound), got \(number)")
            }
            return number
        }

        let device = try text("device", required: true, limit: 64)!
        guard isDeviceID(device) else {
            throw Problem(path: "\(path).device", reason: "\(quoted(device)) is not a device id ([A-Za-z0-9._-], 1 to 64)")
        }
        let timeText = try text("time", required: true, limit: 64)!
        guard let milliseconds = ReportTime.milliseconds(timeText) else {
            throw Problem(
                path: "\(path).time",
                reason: "expected an RFC 3339 time such as 2026-05-01T10:00:00.123Z, got \(quoted(timeText))")
        }
        let kindText = try text("event", required: true, limit: 32)!
        guard let kind = ReportEvent.Kind(rawValue: kindText) else {
            throw Problem(
                path: "\(path).event",
                reason: "\(quoted(kindText)) is not one of \(ReportEvent.Kind.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        let sequence = try integer("sequence", at: field("sequence"), "\(path).sequence", range: 0...Int64(Int32.max) * 1024)
        guard let list = object["packages"]?.array else {
            throw Problem(path: "\(path).packages", reason: object["packages"] == nil ? "missing" : "expected a list")
        }
        guard list.count <= ReportEvent.maximumPackages else {
            throw Problem(path: "\(path).packages", reason: "\(list.count) packages; at most \(ReportEvent.maximumPackages)")
        }
        var packages = [ReportEvent.Package]()
        var ids = Set<String>()
        for (index, item) in list.enumerated() {
            let at = "\(path).packages[\(index)]"
            guard let fields = item.object else { throw Problem(path: at, reason: "expected an object, got \(describe(item))") }
            func version(_ name: String) throws(Problem) -> String? {
                guard let value = fields[name], !value.isNull else { return nil }
                guard let string = value.string, ManifestRules.isValidVersion(string) else {
                    throw Problem(
                        path: "\(at).\(name)",
                        reason: "expected null or a version (\(ManifestRules.versionPattern)), got \(describe(value))")
                }
                return string
            }
            guard let id = fields["id"]?.string, ManifestRules.isValidID(id) else {
                throw Problem(
                    path: "\(at).id",
                    reason: "expected a package id (\(ManifestRules.idPattern)), got \(fields["id"].map(describe) ?? "nothing")")
            }
            guard ids.insert(id).inserted else { throw Problem(path: "\(at).id", reason: "package \"\(id)\" is listed twice") }
            var via: String?
            if let value = fields["via"], !value.isNull {
                guard let string = value.string, ReportEvent.ways.contains(string) else {
                    throw Problem(
                        path: "\(at).via",
                        reason: "expected null or one of \(ReportEvent.ways.joined(separator: ", ")), got \(describe(value))")
                }
                via = string
            }
            let bytes =
                try integer("bytes", at: fields["bytes"].flatMap { $0.isNull ? nil : $0 }, "\(at).bytes", range: 0...(1 << 50))
                ?? 0
            packages.append(.init(id: id, from: try version("from"), to: try version("to"), via: via, bytes: bytes))
        }
        let exitStatus = try integer("exitStatus", at: field("exitStatus"), "\(path).exitStatus", range: 0...255)
        let duration = try integer("durationMs", at: field("durationMs"), "\(path).durationMs", range: 0...(1 << 40))
        return ReportEvent(
            device: device, time: Date(timeIntervalSince1970: Double(milliseconds) / 1000), event: kind,
            sequence: sequence.map(Int.init), packages: packages, exitStatus: exitStatus.map(Int32.init),
            error: try text("error", required: false, limit: 4096), durationMs: duration.map(Int.init),
            shellVersion: try text("shellVersion", required: false, limit: 64),
            offlinepkg: try text("offlinepkg", required: true, limit: 64)!)
    }

    /// `[A-Za-z0-9._-]{1,64}`: a root's UUID, or another id a device of another make may send.
    static func isDeviceID(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        return (1...64).contains(bytes.count)
            && bytes.allSatisfy {
                (0x30...0x39).contains($0) || (0x41...0x5a).contains($0) || (0x61...0x7a).contains($0) || $0 == 0x2e || $0 == 0x5f
                    || $0 == 0x2d
            }
    }

    static func describe(_ value: JSONValue) -> String {
        switch value.kind {
        case .null: "null"
        case .boolean: "a boolean"
        case .number: "the number \(value.number!.literal.prefix(40))"
        case .string: "the string \(quoted(value.string!))"
        case .array: "a list"
        case .object: "an object"
        }
    }

    /// A value for a message: quoted, escaped, cut at 80 characters.
    static func quoted(_ text: String) -> String {
        let cut = text.count > 80 ? String(text.prefix(80)) + "…" : text
        return JSONText.quoted(cut)
    }
}
