/// Which slow-retrieval protection (docs/security.md) ended a transfer, decided in one place: the
/// transfer's progress callback. Retrying and the exit status are decided from this value, never from
/// the text of a message.
public enum SlowRetrieval: Sendable, Equatable, CustomStringConvertible {
    /// No byte arrived for `seconds` (the stall clock).
    case stalled(seconds: Double)
    /// Only `bytes` arrived in a window of `seconds`, an average under the floor of `floor` bytes/s: a
    /// trickle that keeps the stall clock from ever firing.
    case belowMinimumRate(bytes: Int64, seconds: Double, floor: Int64)
    /// The whole fetch (every attempt included) was not done within `seconds`.
    case deadline(what: String, seconds: Double)

    /// Whether another attempt may cure it: a bad link recovers from a stall or a slow patch, but a
    /// deadline spans every attempt, so once it has passed no retry can meet it.
    package var isRetryable: Bool {
        if case .deadline = self { return false }
        return true
    }

    public var description: String {
        switch self {
        case .stalled(let seconds):
            "stalled: no byte for \(Self.format(seconds)) s"
        case .belowMinimumRate(let bytes, let seconds, let floor):
            "below the minimum rate: \(bytes) bytes in \(Self.format(seconds)) s, under \(floor) bytes/s"
        case .deadline(let what, let seconds):
            "the \(what) was not complete within its deadline of \(Self.format(seconds)) s"
        }
    }

    static func format(_ seconds: Double) -> String {
        seconds == seconds.rounded() ? String(Int(seconds)) : String(seconds)
    }
}
