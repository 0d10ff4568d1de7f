import FoundationEssentials

#if canImport(Glibc)
import Glibc
#endif

/// The frames of a file-level update, on every kind of origin (SPEC §13). How an origin takes ranges is
/// found out from its first answer to several ranges and remembered in the root (`OriginRanges`):
///
/// - several a request (a 206 `multipart/byteranges`, as nginx answers): the plan's few large requests,
///   four at a time;
/// - one a request (a 200 with the whole file, a 416, or one part, as S3, GCS, R2 and OSS answer): the
///   whole-file answer is cut off at its head, and every range not yet come is asked again one a
///   request, neighbours merged within the waste budget (`RangePlan(oneRangeARequest:)`), sixteen at a
///   time (streams of one HTTP/2 connection, or a few HTTP/1.1 connections, as the transport has them);
/// - none (a 200 to one range, cut off too): the file-level way ends, and the package comes by a delta
///   or the archive in the same sync.
///
/// While the mode is not known, the first request that asks several ranges goes alone; the others follow
/// its answer. An origin that changes its answers within a sync (several ranges refused where they were
/// served) is taken at its word at once.
extension FileFetcher {
    /// What one request brought: the verdict, and the wanted ranges of the spans that did not come.
    private struct RequestOutcome: Sendable {
        var verdict: RangeFetcher.Answer.Verdict
        var undelivered: [ByteRange]
        var server: String?
    }

    func fetchFrames(
        _ entry: PackageEntry, plan: Plan, archiveURL: URL, staging: String, frames: String, received: ProgressCounter
    ) async throws {
        var byRange = [ByteRange: FileIndex.Entry]()
        for file in plan.fetch { byRange[ByteRange(offset: file.offset, length: file.length)] = file }
        let members = byRange
        var support = plan.support
        var left = plan.ranges.requests[...]
        while !left.isEmpty {
            if support == nil, let probe = left.firstIndex(where: { $0.spans.count > 1 }) {
                // One request alone finds the origin out; the rest follow in its mode.
                let request = left.remove(at: probe)
                let outcome = try await fetchAndUnpack(request, members, entry, archiveURL, staging, frames, received)
                switch outcome.verdict {
                case .served:
                    support = .multipart
                    origins.remember(.multipart, for: archiveURL, server: outcome.server)
                case .oneRangeARequest:
                    support = .single
                    origins.remember(.single, for: archiveURL, server: outcome.server)
                    left = replanned(outcome.undelivered + left.flatMap { $0.spans.flatMap(\.wanted) })
                case .noRanges(let reason):
                    throw noRanges(archiveURL, reason, server: outcome.server)
                }
                continue
            }
            let round = Array(left)
            left = []
            var undelivered = [ByteRange]()
            var refusedSeveral: String?
            let inFlight = support == .single ? maxOneRangeInFlight : maxInFlight
            try await withThrowingTaskGroup(of: RequestOutcome.self) { group in
                var pending = round[...]
                func startNext() {
                    guard let request = pending.popFirst() else { return }
                    group.addTask {
                        try await fetchAndUnpack(request, members, entry, archiveURL, staging, frames, received)
                    }
                }
                for _ in 0..<max(1, inFlight) { startNext() }
                while let outcome = try await group.next() {
                    switch outcome.verdict {
                    case .served:
                        origins.forgetIfServerChanged(archiveURL, server: outcome.server)
                    case .oneRangeARequest:
                        refusedSeveral = outcome.server ?? ""
                        undelivered += outcome.undelivered
                    case .noRanges(let reason):
                        throw noRanges(archiveURL, reason, server: outcome.server)
                    }
                    startNext()
                }
            }
            if let server = refusedSeveral {
                // The origin no longer serves several ranges a request: what it did not send, one a request.
                support = .single
                origins.remember(.single, for: archiveURL, server: server.isEmpty ? nil : server)
                left = replanned(undelivered)
            }
        }
    }

    /// Finds out how `url`'s origin takes ranges, when the root does not know yet, and remembers it
    /// (`RangeFetcher.probe`).
    func probeOrigin(_ url: URL, size: Int64) async {
        guard origins.support(for: url) == nil, let (support, server) = await ranges.probe(url, size: size) else { return }
        origins.remember(support, for: url, server: server)
    }

    /// The wanted ranges planned again for an origin that answers one range a request.
    private func replanned(_ wanted: [ByteRange]) -> ArraySlice<RangePlan.Request> {
        let bytes = wanted.reduce(0) { $0 + $1.length }
        return RangePlan(oneRangeARequest: wanted, wasteBudget: RangePlan.wasteBudget(forWanted: bytes)).requests[...]
    }

    private func noRanges(_ url: URL, _ reason: String, server: String?) -> OfflinePkgError {
        origins.remember(.none, for: url, server: server)
        return .rangesRefused(url: url.absoluteString, reason: reason)
    }

    /// One request, retried like a download (each attempt writes the members' frames afresh); the members
    /// of the spans that came are unpacked into staging and the content store.
    private func fetchAndUnpack(
        _ request: RangePlan.Request, _ members: [ByteRange: FileIndex.Entry], _ entry: PackageEntry, _ url: URL,
        _ staging: String, _ frames: String, _ received: ProgressCounter
    ) async throws -> RequestOutcome {
        let (sink, answer) = try await downloader.retry.run { _ in
            let sink = FrameFiles(folder: frames)
            do {
                let answer = try await ranges.answer(request, from: url, size: entry.archive.size) { range, _, chunk in
                    try sink.write(range, chunk)
                }
                _ = received.add(answer.received)
                try sink.closeAll()
                return (sink, answer)
            } catch {
                sink.removeAll()
                throw error
            }
        }
        defer { sink.removeAll() }
        var undelivered = [ByteRange]()
        var came = [ByteRange]()
        for (span, delivered) in zip(request.spans, answer.delivered) {
            if delivered { came += span.wanted } else { undelivered += span.wanted }
        }
        let archiveName = entry.archive.url
        let unpack = came
        try await runBlocking {
            for wanted in unpack {
                try unpackMember(members[wanted]!, from: sink.path(of: wanted), archiveName: archiveName, staging: staging)
            }
        }
        return RequestOutcome(verdict: answer.verdict, undelivered: undelivered, server: answer.server)
    }
}

/// The frames of one request's members, each in its own file in the frames folder, written on the
/// transfer's thread.
private final class FrameFiles: @unchecked Sendable {
    let folder: String
    private var open: [ByteRange: FileDescriptor] = [:]
    private var paths: [ByteRange: String] = [:]

    init(folder: String) { self.folder = folder }

    func path(of range: ByteRange) -> String {
        paths[range] ?? folder + "/\(range.offset)-\(range.length)"
    }

    func write(_ range: ByteRange, _ chunk: UnsafeRawBufferPointer) throws {
        let path = self.path(of: range)
        let descriptor: FileDescriptor
        if let known = open[range] {
            descriptor = known
        } else {
            descriptor = try FileDescriptor.open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, mode: 0o600)
            open[range] = descriptor
            paths[range] = path
        }
        try descriptor.writeAll(chunk, path: path)
    }

    func closeAll() throws {
        for descriptor in open.values { descriptor.close() }
        open = [:]
    }

    func removeAll() {
        for descriptor in open.values { descriptor.close() }
        open = [:]
        for path in paths.values { FileSystem.discardFile(path) }
    }
}
