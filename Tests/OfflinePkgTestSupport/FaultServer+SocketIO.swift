import Foundation
import OfflinePkg
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The fault server's socket I/O: reading a request, writing an answer whole, waiting until it left.
extension FaultEngine {
    /// Reads the request head (up to 64 KiB); a request body, if any, is ignored.
    func readRequest(_ connection: Int32) -> RecordedRequest? {
        var buffer = [UInt8]()
        var chunk = [UInt8](repeating: 0, count: 4096)
        let terminator: [UInt8] = [13, 10, 13, 10]
        while buffer.count < 65536 {
            if let end = buffer.firstRange(of: terminator) {
                buffer.removeSubrange(end.lowerBound...)
                break
            }
            let count = recv(connection, &chunk, chunk.count, 0)
            guard count > 0 else { return nil }
            buffer += chunk[..<count]
        }
        let lines = String(decoding: buffer, as: UTF8.self).components(separatedBy: "\r\n")
        let parts = lines[0].split(separator: " ")
        guard parts.count == 3 else { return nil }
        var headers = [String: String]()
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(
                in: .whitespaces)
        }
        let target = String(parts[1])
        let path = String(target.prefix { $0 != "?" })
        let now = Date()
        return RecordedRequest(
            method: String(parts[0]), target: target, path: path, headers: headers, status: 0, behaviour: .normal,
            bodyBytesSent: 0, receivedAt: now, answeredAt: now)
    }

    /// Sends `bytes`, returning how many went out before an error (a client that hung up).
    func sendAll(_ connection: Int32, _ bytes: [UInt8]) -> Int {
        var sent = 0
        while sent < bytes.count {
            let count = bytes[sent...].withUnsafeBytes {
                send(connection, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
            }
            guard count > 0 else { break }
            sent += count
        }
        return sent
    }

    // An RST discards whatever is still in the send queue; wait (briefly) until the peer has
    // acknowledged every byte, so the client really receives the promised prefix.
    func waitUntilSent(_ connection: Int32) {
        var pending: Int32 = 0
        for _ in 0..<500 {
            guard ioctl(connection, UInt(TIOCOUTQ), &pending) == 0, pending > 0 else { return }
            usleep(2_000)
        }
    }

    static func reason(_ status: Int) -> String {
        let phrases = [
            200: "OK", 206: "Partial Content", 301: "Moved Permanently", 302: "Found", 304: "Not Modified",
            307: "Temporary Redirect", 404: "Not Found", 416: "Range Not Satisfiable", 429: "Too Many Requests",
            500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable",
        ]
        return phrases[status] ?? "Status"
    }
}
