import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A stand-in for the collector on 127.0.0.1:`port` that decides per device (the first event's
/// `device` in a POST body) what happens to its send: passed to the collector at `upstream` and answered
/// as usual; passed on but never answered (the collector stored it, the device never hears so); or held
/// without passing it on. For killing devices in the middle of a send, with one connection per request
/// (nginx talks to its upstream so).
final class HoldingProxy: Sendable {
    enum Treatment: Sendable {
        case relay
        case forwardThenHold
        case hold
    }

    private let listener: Int32
    private let upstream: Int
    private let treatments: [String: Treatment]
    private let state = Mutex<(held: [String], forwarded: [String], sockets: [Int32], stopped: Bool)>(([], [], [], false))

    init(port: Int, upstream: Int, treatments: [String: Treatment]) throws {
        self.upstream = upstream
        self.treatments = treatments
        listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var one: Int32 = 1
        setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = Self.loopback(port)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(listener, 64) == 0 else {
            close(listener)
            throw POSIXError(.EADDRINUSE)
        }
        Thread { [self] in accept() }.start()
    }

    /// Devices whose send is held now, and those whose send reached the collector without an answer.
    var held: [String] { state.withLock { $0.held } }
    var forwarded: [String] { state.withLock { $0.forwarded } }

    func stop() {
        let sockets = state.withLock { state in
            state.stopped = true
            return state.sockets
        }
        for socket in sockets { shutdown(socket, Int32(SHUT_RDWR)) }
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }

    private func accept() {
        while !state.withLock({ $0.stopped }) {
            let connection = Glibc.accept(listener, nil, nil)
            guard connection >= 0 else { return }
            state.withLock { $0.sockets.append(connection) }
            Thread { [self] in serve(connection) }.start()
        }
    }

    private func serve(_ connection: Int32) {
        guard let request = Self.readRequest(connection) else {
            close(connection)
            return
        }
        let device = Self.device(in: request.body) ?? ""
        let treatment = treatments[device] ?? .relay
        if treatment == .hold {
            state.withLock { $0.held.append(device) }
            return
        }
        let answer = forward(request.raw)
        if treatment == .forwardThenHold {
            state.withLock {
                $0.forwarded.append(device)
                $0.held.append(device)
            }
            return
        }
        _ = answer.withUnsafeBytes { send(connection, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        close(connection)
    }

    /// Sends `raw` to the collector and reads its whole answer (it closes after one, as asked).
    private func forward(_ raw: [UInt8]) -> [UInt8] {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = Self.loopback(upstream)
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else { return Array("HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n".utf8) }
        _ = raw.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        var answer = [UInt8]()
        var chunk = [UInt8](repeating: 0, count: 16_384)
        while true {
            let count = recv(fd, &chunk, chunk.count, 0)
            if count <= 0 { return answer }
            answer += chunk[..<count]
        }
    }

    /// The request as received (with `Connection: close` for the upstream) and its body.
    private static func readRequest(_ connection: Int32) -> (raw: [UInt8], body: [UInt8])? {
        var buffer = [UInt8]()
        var chunk = [UInt8](repeating: 0, count: 16_384)
        let terminator: [UInt8] = [13, 10, 13, 10]
        while buffer.firstRange(of: terminator) == nil {
            let count = recv(connection, &chunk, chunk.count, 0)
            guard count > 0 else { return nil }
            buffer += chunk[..<count]
        }
        let end = buffer.firstRange(of: terminator)!.upperBound
        let head = String(decoding: buffer[..<end], as: UTF8.self)
        let length =
            head.split(separator: "\r\n").first { $0.lowercased().hasPrefix("content-length:") }
            .flatMap { Int($0.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) } ?? 0
        while buffer.count < end + length {
            let count = recv(connection, &chunk, chunk.count, 0)
            guard count > 0 else { return nil }
            buffer += chunk[..<count]
        }
        var lines = head.split(separator: "\r\n").filter { !$0.lowercased().hasPrefix("connection:") }.map(String.init)
        lines.append("Connection: close")
        let raw = Array((lines.joined(separator: "\r\n") + "\r\n\r\n").utf8) + buffer[end..<(end + length)]
        return (raw, Array(buffer[end..<(end + length)]))
    }

    private static func device(in body: [UInt8]) -> String? {
        guard let events = try? JSONSerialization.jsonObject(with: Data(body)) as? [[String: Any]] else { return nil }
        return events.first?["device"] as? String
    }

    private static func loopback(_ port: Int) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = in_addr_t(0x7f00_0001).bigEndian
        return address
    }
}
