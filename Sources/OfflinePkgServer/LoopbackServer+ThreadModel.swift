import FoundationEssentials

extension LoopbackServer {
    /// How MHD runs connections.
    public enum ThreadModel: Sendable, Equatable {
        /// This many lanes (one thread each, polling many connections; `ConnectionAcceptor` spreads them).
        case pool(threads: Int)
        /// `threads` lanes while they hold fewer than `spreadPast` connections each on average; past that,
        /// new connections go to the emptiest of `busyThreads` lanes (the first `threads` among them). A
        /// connection stays on its lane until it closes; a lane beyond the first `threads` gives its
        /// cached responses' memory back when its last one does.
        case elastic(threads: Int, busyThreads: Int, spreadPast: Int)
        /// One thread per connection (poll).
        case threadPerConnection

        /// `standard(cores:)` for this device.
        public static var standard: ThreadModel { standard(cores: ProcessInfo.processInfo.activeProcessorCount) }

        /// For a device of `cores` cores: a lane per two cores, at least one, and a lane per core once
        /// those hold `spreadPast` connections each on average.
        ///
        /// The server's clients run on the same cores (the web view's renderer and network process,
        /// or a load generator), so a lane per core means more busy threads than cores, and a lane
        /// taken off its core holds every connection it has until its turn comes back (a scheduler
        /// slice): with a web view's handful of connections, one lane on two cores answers with a
        /// shorter tail than two. A lane holding hundreds of connections is never idle, though, and then
        /// it is one thread taking turns with its clients' many, and a second lane shortens the tail
        /// again (the `serve-load` row of docs/performance.md measures both). Past 128 per
        /// lane (Chromium opens at most six per host over HTTP/1.1, 256 in all), the device is
        /// serving more clients than a shell's.
        public static func standard(cores: Int) -> ThreadModel {
            .elastic(threads: lanes(cores: cores), busyThreads: max(1, cores), spreadPast: spreadPast)
        }

        /// Quiet lanes for a device of `cores` cores: half of them, at least one.
        public static func lanes(cores: Int) -> Int { max(1, cores / 2) }

        /// Connections per quiet lane past which the standard model spreads over a lane per core.
        public static let spreadPast = 128

        /// Lanes in all, the ones that take connections until they hold `spreadPast` each, and that count.
        var lanes: (all: Int, quiet: Int, spreadPast: Int) {
            switch self {
            case .pool(let threads): (threads, threads, .max)
            case .elastic(let threads, let busyThreads, let spreadPast): (busyThreads, threads, spreadPast)
            case .threadPerConnection: (1, 1, .max)
            }
        }
    }
}
