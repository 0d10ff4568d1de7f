internal import CMicroHTTPD
import FoundationEssentials
import OfflinePkg
import Synchronization

/// The MHD response for an answer the runtime cache does not store: its body is read from the upstream
/// transfer as it arrives (`RuntimeStream`), never from a file (docs/protocol.md#neighbours-on-the-device). MHD asks for the next bytes
/// whenever the socket has room; with none there yet the connection is suspended, and the transfer
/// resumes it when more come, so a lane's thread never waits on the network. In the
/// thread-per-connection model, where MHD cannot suspend, the connection's own thread waits instead.
///
/// MHD frees the response when the answer is sent, or its client went away: the stream is cancelled
/// then, which ends the upstream transfer.
final class StreamedResponse: Sendable {
    private let stream: RuntimeStream
    /// The connection's address (`OpaquePointer` is not `Sendable`).
    private let connection: UInt
    private let canSuspend: Bool
    /// Whether the connection is suspended for want of bytes: exactly one resume follows each suspend.
    private let parked = Atomic<Bool>(false)
    private let registry: StreamedResponses

    private init(
        _ stream: RuntimeStream, connection: OpaquePointer, canSuspend: Bool, registry: StreamedResponses
    ) {
        self.stream = stream
        self.connection = UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(connection)))
        self.canSuspend = canSuspend
        self.registry = registry
    }

    /// Bytes MHD asks for at most per call.
    static let blockSize = 64 << 10

    /// A response for `stream` on `connection`, kept in `registry` until MHD frees it; nil when MHD
    /// cannot make one (the stream is then cancelled).
    static func make(
        _ stream: RuntimeStream, connection: OpaquePointer, canSuspend: Bool, registry: StreamedResponses
    ) -> OpaquePointer? {
        let body = StreamedResponse(stream, connection: connection, canSuspend: canSuspend, registry: registry)
        let context = Unmanaged.passRetained(body).toOpaque()
        let response = MHD_create_response_from_callback(
            stream.length.map { UInt64($0) } ?? UInt64.max, blockSize,
            { context, _, buffer, max in
                let body = Unmanaged<StreamedResponse>.fromOpaque(context!).takeUnretainedValue()
                return body.read(into: UnsafeMutableRawBufferPointer(start: buffer, count: max))
            },
            context,
            { context in
                let body = Unmanaged<StreamedResponse>.fromOpaque(context!)
                body.takeUnretainedValue().freed()
                body.release()
            })
        guard let response else {
            Unmanaged<StreamedResponse>.fromOpaque(context).release()
            stream.cancel()
            return nil
        }
        registry.add(body)
        return response
    }

    /// MHD's content reader: bytes copied, 0 after suspending the connection (nothing there yet), or
    /// MHD's end-of-stream (-1) or error (-2, which closes the connection: the client sees it short).
    private func read(into buffer: UnsafeMutableRawBufferPointer) -> Int {
        let result: RuntimeStream.ReadResult
        if canSuspend {
            let connection = connection
            result = stream.read(into: buffer) { [self] in
                // Under the stream's lock: no chunk arrives between the look and the suspend.
                MHD_suspend_connection(OpaquePointer(bitPattern: connection)!)
                parked.store(true, ordering: .releasing)
                return { [self] in resume() }
            }
        } else {
            result = stream.readWaiting(into: buffer)
        }
        switch result {
        case .bytes(let count): return count
        case .parked: return 0
        case .end: return -1
        case .failed: return -2
        }
    }

    private func resume() {
        guard parked.exchange(false, ordering: .acquiringAndReleasing) else { return }
        MHD_resume_connection(OpaquePointer(bitPattern: connection)!)
    }

    /// The server stops: the body ends short, and a suspended connection is resumed (MHD may not stop
    /// with one suspended) to see it.
    func abandon() {
        stream.cancel()
        resume()
    }

    private func freed() {
        stream.cancel()
        registry.remove(self)
    }
}

/// The streamed responses MHD holds now, for `RuntimeCacheResponder.abandonWaiting`.
final class StreamedResponses: Sendable {
    private let live = Mutex<[ObjectIdentifier: StreamedResponse]>([:])

    func add(_ response: StreamedResponse) { live.withLock { $0[ObjectIdentifier(response)] = response } }
    func remove(_ response: StreamedResponse) { _ = live.withLock { $0.removeValue(forKey: ObjectIdentifier(response)) } }
    var all: [StreamedResponse] { live.withLock { Array($0.values) } }
}
