import FoundationEssentials

/// The wall-clock time as the library reads it. Every time a sync, a rollback, the runtime cache or a
/// command records comes from one of these, handed in with the rest of the outside world (`World`), so
/// a test sets the time instead of waiting for it. `system` is the one place the system clock is read.
package struct WallClock: Sendable {
    private let read: @Sendable () -> Date

    package init(_ read: @escaping @Sendable () -> Date) { self.read = read }

    /// The system's clock.
    package static let system = WallClock { Date() }

    /// A clock stopped at `date`.
    package static func fixed(_ date: Date) -> WallClock { WallClock { date } }

    package func now() -> Date { read() }
}
