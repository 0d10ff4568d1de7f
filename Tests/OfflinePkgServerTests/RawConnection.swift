import Foundation
import OfflinePkgTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// A TCP connection to 127.0.0.1 that sends exactly the bytes it is given: the malformed requests no
/// HTTP client library would write, and the idle or trickling connections of a flood.
final class RawConnection {
    let fd: Int32

    /// `receiveBuffer`: a small receive buffer (set before connecting, so the window stays small),
    /// for a client that reads slowly.
    init(port: Int, receiveTimeout: TimeInterval = 5, receiveBuffer: Int32? = nil) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw TestSupportError("socket: \(String(cString: strerror(errno)))") }
        if var size = receiveBuffer { setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size)) }
        var timeout = timeval(tv_sec: Int(receiveTimeout), tv_usec: Int((receiveTimeout - receiveTimeout.rounded(.down)) * 1e6))
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else {
            let reason = String(cString: strerror(errno))
            close(fd)
            throw TestSupportError("connect to 127.0.0.1:\(port): \(reason)")
        }
    }

    deinit { close(fd) }

    @discardableResult
    func send(_ bytes: [UInt8]) -> Bool {
        bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) == $0.count }
    }

    @discardableResult
    func send(_ text: String) -> Bool { send(Array(text.utf8)) }

    /// Reads one response (headers, and a body of its Content-Length), or what came before the peer
    /// closed or the receive timeout passed.
    func readResponse() -> HTTPReply? {
        var data = [UInt8]()
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            if let end = Self.headerEnd(data) {
                let reply = HTTPReply(String(decoding: data, as: UTF8.self))
                let length = Int(reply.headers["content-length"] ?? "0") ?? 0
                if data.count - end >= length { return HTTPReply(String(decoding: data.prefix(end + length), as: UTF8.self)) }
            }
            let count = recv(fd, &buffer, buffer.count, 0)
            if count <= 0 { return data.isEmpty ? nil : HTTPReply(String(decoding: data, as: UTF8.self)) }
            data += buffer[..<count]
        }
    }

    /// What one read returns, up to `count` bytes; empty at end of file or the receive timeout.
    func receiveSome(_ count: Int) -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: count)
        let read = recv(fd, &buffer, count, 0)
        return read > 0 ? Array(buffer[..<read]) : []
    }

    /// Whether the peer has closed: a read returns end of file (or the connection was reset).
    func isClosedByPeer() -> Bool {
        var byte: UInt8 = 0
        let count = recv(fd, &byte, 1, Int32(MSG_DONTWAIT))
        return count == 0 || (count < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
    }

    private static func headerEnd(_ data: [UInt8]) -> Int? {
        guard data.count >= 4 else { return nil }
        for index in 0...(data.count - 4)
        where data[index] == 13 && data[index + 1] == 10 && data[index + 2] == 13 && data[index + 3] == 10 {
            return index + 4
        }
        return nil
    }
}

/// `offlinepkg serve` as a child process, with the URL it printed; killed on deinit.
final class ServeProcess: Sendable {
    let child: ChildProcess
    let url: URL
    var port: Int { url.port ?? 0 }
    var pid: pid_t { child.pid }

    /// `launcher`: a command that runs serve in its stead (`prlimit --nofile=200:200`, which execs it).
    init(root: String, _ extra: [String] = [], environment: [String: String] = [:], launcher: [String] = []) throws {
        let command = launcher + [OfflinePkgBinary.path, "serve", "--root", root, "--port", "0"] + extra
        child = try ChildProcess(
            command[0], Array(command.dropFirst()),
            environment: environment.isEmpty ? nil : ProcessInfo.processInfo.environment.merging(environment) { _, new in new })
        let text = (child.firstLine() ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
        guard let url = URL(string: text), url.port != nil else {
            child.kill()
            throw TestSupportError("offlinepkg serve printed \"\(text)\", not its URL")
        }
        self.url = url
    }

    /// SIGTERM (serve writes its counters and exits), and wait for it to be gone.
    func stop() {
        child.signal(SIGTERM)
        child.wait()
    }

    /// SIGKILL, and wait for it to be gone.
    func kill() { child.kill() }

    deinit { kill() }
}

/// Raises this process's open-file limit to its hard limit (a flood holds thousands of sockets).
func raiseOpenFileLimit() -> Int {
    var limit = rlimit()
    getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
    limit.rlim_cur = limit.rlim_max
    setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
    getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
    return Int(limit.rlim_cur)
}
