import Foundation

/// What `ss` reports of TCP connections on this host.
public enum SocketStatistics {
    /// Congestion controls the kernel has loaded: the only names `ss` can show for a connection.
    static let congestionControls = Set(
        ((try? String(contentsOfFile: "/proc/sys/net/ipv4/tcp_available_congestion_control", encoding: .utf8)) ?? "")
            .split(whereSeparator: \.isWhitespace).map(String.init))

    /// The `ss` command that lists the established connections whose local end is `port` (a server's
    /// side of its connections), with their details.
    public static func command(connectionsFrom port: Int) -> [String] {
        ["ss", "-H", "-t", "-i", "-n", "state", "established", "( sport = :\(port) )"]
    }

    /// The congestion control of each connection `ss -ti` listed in `listing`: there each connection
    /// is a line of addresses and a line of details, where the algorithm is a bare word among flags
    /// (`ts sack cubic wscale:7,7 rto:204 …`).
    public static func congestionControls(inListing listing: String) -> [String] {
        listing.split(whereSeparator: \.isWhitespace).map(String.init).filter(congestionControls.contains)
    }

    /// The congestion control of each established connection whose local end is `port`.
    public static func congestionControls(ofConnectionsFrom port: Int) throws -> [String] {
        let command = command(connectionsFrom: port)
        return congestionControls(inListing: try run(command[0], Array(command.dropFirst()), timeout: 10).checked("ss").stdout)
    }
}
