/// Runs blocking work (unpacking, hashing a tree) on a thread of its own, so it never ties up a thread
/// of Swift's cooperative pool that downloads and the host's tasks need.
package func runBlocking<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        let body: @Sendable () -> Void = { continuation.resume(with: Result { try work() }) }
        // Where no thread can be made (a process or thread limit), the work runs here rather than never.
        if !OSThread.start(name: "offlinepkg.work", stackSize: 4 << 20, body) { body() }
    }
}
