internal import CCurl
import FoundationEssentials
import Synchronization

/// The transport for http, https and file URLs, on libcurl. Made with `CurlTransport()`, each transfer
/// runs `curl_easy_perform` on a thread of its own, so a slow server never ties up Swift's cooperative
/// pool. Made with `sharingConnections`, transfers run on one `CurlSession`: connections are reused
/// from one request to the next, and over HTTP/2 many transfers share one connection.
package struct CurlTransport: Transport {
    private let session: CurlSession?

    /// Opens nothing: libcurl is loaded at the first transfer (CCurl), so a command or a host that makes
    /// a `World` and never fetches never maps it.
    package init() { session = nil }

    /// A transport whose transfers share connections (`CurlSession`): what a sync uses, so the manifest,
    /// the file index and the ranges after it cost no new handshake, and an HTTP/2 origin carries every
    /// range request of a file-level update on one connection. The connections close with the last copy
    /// of the transport (a sync's, at its end).
    package static func sharingConnections(_ limits: CurlSession.Limits = .init()) -> CurlTransport {
        CurlTransport(session: CurlSession(limits: limits))
    }

    /// This transport with its transfers sharing connections: itself when they do already.
    package func sharingConnections() -> CurlTransport { session == nil ? .sharingConnections() : self }

    private init(session: CurlSession) { self.session = session }

    // curl_global_init must run once, before any other thread uses libcurl; Swift runs this lazily, once.
    static let globalInit: Void = { curl_global_init(Int(CURL_GLOBAL_DEFAULT)) }()

    package func get(
        _ request: TransferRequest, onResponse: @escaping @Sendable (TransferResponseHead) throws -> Void,
        onBody: @escaping @Sendable (UnsafeRawBufferPointer) throws -> Void
    ) async throws -> TransferResponseHead {
        _ = CurlTransport.globalInit
        let transfer = CurlTransfer(request: request, onResponse: onResponse, onBody: onBody)
        if let session { return try await session.perform(transfer) }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let body: @Sendable () -> Void = { continuation.resume(with: transfer.perform()) }
                // Where no thread can be made (a process or thread limit), the transfer runs here rather than never.
                if !OSThread.start(name: "offlinepkg.curl", stackSize: 1 << 20, body) { body() }
            }
        } onCancel: {
            transfer.cancelled.store(true, ordering: .relaxed)
        }
    }
}
