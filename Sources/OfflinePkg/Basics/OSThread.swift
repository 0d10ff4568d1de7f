internal import CSystemShims

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Threads of their own, over pthreads: for blocking work that must not hold a thread of Swift's
/// cooperative pool (libcurl's transfers, unpacking, writer lanes) and for the few watchers that poll.
/// Foundation's `Thread` is not in FoundationEssentials, and it ignores a failed `pthread_create`; here
/// the caller learns of it and chooses (run the work where it is, or give up).
package enum OSThread {
    /// Starts `body` on a detached thread with a stack of `stackSize` bytes (the system's default when
    /// nil), named `name` as `top` and `/proc` show it (the kernel keeps 15 bytes). False when no thread
    /// could be made (`EAGAIN` at a process or thread limit); `body` then never runs.
    @discardableResult
    package static func start(name: String? = nil, stackSize: Int? = nil, _ body: @escaping @Sendable () -> Void) -> Bool {
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
        if let stackSize { pthread_attr_setstacksize(&attributes, max(stackSize, Int(PTHREAD_STACK_MIN))) }
        let start = ThreadStart(name: name, body: body)
        let context = Unmanaged.passRetained(start).toOpaque()
        var thread = pthread_t()
        guard pthread_create(&thread, &attributes, runOSThread, context) == 0 else {
            Unmanaged<ThreadStart>.fromOpaque(context).release()
            return false
        }
        return true
    }

    /// Sleeps the calling thread for `seconds` (a watcher's poll; never in async code).
    package static func sleep(seconds: Double) {
        var time = timespec(tv_sec: Int(seconds), tv_nsec: Int((seconds - seconds.rounded(.down)) * 1e9))
        var left = timespec()
        while nanosleep(&time, &left) == -1 && errno == EINTR { time = left }
    }
}

/// What `pthread_create` hands the new thread: its name and body.
private final class ThreadStart {
    let name: String?
    let body: @Sendable () -> Void
    init(name: String?, body: @escaping @Sendable () -> Void) {
        self.name = name
        self.body = body
    }
}

// The thread's entry: a plain function, as pthread_create takes a C function pointer.
private func runOSThread(_ context: UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer? {
    let start = Unmanaged<ThreadStart>.fromOpaque(context!).takeRetainedValue()
    if let name = start.name { _ = csystemshims_name_thread(String(name.utf8.prefix(15))!) }
    start.body()
    return nil
}

/// A mutex and condition variable (`NSCondition`'s shape, which FoundationEssentials lacks), for the
/// hand-overs between a reading thread and its writers. Thread-safe by construction: `@unchecked`.
package final class ThreadCondition: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)

    package init() {
        pthread_mutex_init(mutex, nil)
        // Timed waits measure the monotonic clock: a change of the wall clock neither ends nor stretches them.
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(condition, &attributes)
        pthread_condattr_destroy(&attributes)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    package func lock() { pthread_mutex_lock(mutex) }
    package func unlock() { pthread_mutex_unlock(mutex) }
    /// Waits, the mutex held, until signalled (or woken spuriously: callers loop on their predicate).
    package func wait() { pthread_cond_wait(condition, mutex) }

    /// Waits at most `seconds` (a day at most per call, so that `.infinity` or a huge timeout a host
    /// passes is a long wait, not an overflow; callers loop on their predicate); false when the time ran out.
    @discardableResult
    package func wait(seconds: Double) -> Bool {
        let seconds = seconds.isNaN ? 0 : min(max(seconds, 0), 86_400)
        var deadline = timespec()
        clock_gettime(CLOCK_MONOTONIC, &deadline)
        let nanoseconds = deadline.tv_nsec + Int(seconds * 1e9)
        deadline.tv_sec += nanoseconds / 1_000_000_000
        deadline.tv_nsec = nanoseconds % 1_000_000_000
        return pthread_cond_timedwait(condition, mutex, &deadline) == 0
    }

    package func signal() { pthread_cond_signal(condition) }
    package func broadcast() { pthread_cond_broadcast(condition) }
}
