/// Every failure offlinepkg reports. Messages are lowercase and say what, where, expected vs actual.
/// Only the CLI turns an error into an exit status, through `category`.
public enum OfflinePkgError: Error, Sendable, Equatable {
    /// A system call on `path` failed.
    case io(path: String, operation: String, Errno)
    /// The manifest breaks a rule of the format: `field` locates the value, e.g. `packages[1].routes[0]`.
    case invalidManifest(source: String, field: String, reason: String)
    /// The manifest's `format` is newer than this build understands.
    case manifestFormatTooNew(source: String, format: Int)
    /// A replay or rollback: a lower sequence, or the same sequence with other bytes.
    case manifestRollback(source: String, reason: String)
    /// The manifest's `expires` time has passed (freeze protection).
    case manifestExpired(source: String, expires: String)
    /// The manifest signature is missing, malformed, from an untrusted key, or wrong.
    case signatureRefused(source: String, reason: String)
    /// A keys document (docs/protocol.md#keys-documents) is malformed, breaks the chain of versions, has
    /// expired, or the manifest names a keys version this root cannot trust: `source` names the document or
    /// manifest.
    case keysRefused(source: String, reason: String)
    /// A download did not hash to what the manifest promised.
    case hashMismatch(what: String, expected: String, actual: String)
    /// A download or input is larger or smaller than it may be.
    case sizeMismatch(what: String, reason: String)
    /// An archive holds something a device never accepts; `entry` names it where there is one.
    case archiveRefused(archive: String, entry: PackagePath?, reason: String)
    /// An unpacked tree does not hash to the manifest's `tree`.
    case treeMismatch(package: String, expected: String, actual: String)
    /// A transfer failed: connection, timeout, TLS, an HTTP status that is not success, no such file
    /// (`TransferFailure.notFound`). Retrying is decided from `failure`, never from the message.
    case transfer(url: String, failure: TransferFailure)
    /// A `Range` request was not answered with the asked ranges: a 200 instead of 206, a part missing,
    /// garbled or outside what was asked. The caller falls back to a whole download.
    case rangesRefused(url: String, reason: String)
    /// A slow-retrieval protection ended the transfer (a stall, a trickle under the rate floor, or the
    /// manifest's deadline), and the retries ran out on it: the last attempt was cut off too.
    case slowRetrieval(url: String, protection: SlowRetrieval)
    /// Another process holds the lock of the cache root.
    case locked(root: String)
    /// The cache root lacks the free space the sync needs.
    case insufficientSpace(path: String, needed: Int64, available: Int64)
    /// The cache root holds something this build cannot read.
    case corruptState(path: String, reason: String)
    /// The cache root `root` cannot be made or written by this process: `operation` on `path` failed
    /// with `EACCES`, `EPERM` or `EROFS` (another user's root, a read-only file system, a default root
    /// under a home this user may not write).
    case rootNotWritable(root: String, path: String, operation: String, Errno)
    /// A request that cannot be met with what is installed (no previous set, unknown URL, ...).
    case unavailable(String)
    /// Some packages of a release failed; the active set was not switched.
    case releaseIncomplete(failures: [String: OfflinePkgError])
    /// A caller passed something that is not valid (a bad URL, a bad option value).
    case invalidArgument(String)
    /// `publish` will not write this release: a missing entry file, a symlink in the site, a version
    /// already published with other content, a route another package owns.
    case publishRefused(reason: String)
    /// A chunked archive's file index (docs/protocol.md#chunked-archives-and-file-indexes) breaks a rule: `field` locates the value, e.g. `[3].path`.
    case invalidFileIndex(source: String, field: String, reason: String)

    /// How the failure is classified for exit statuses (docs/protocol.md#exit-statuses).
    public enum Category: Sendable {
        /// Network, disk, not found: exit 1.
        case failure
        /// Refused input: signature, hash, format, rollback, bad archive: exit 4.
        case refused
        /// Another sync holds the lock: exit 3.
        case locked
        /// Bad usage: exit 2.
        case usage
    }

    public var category: Category {
        switch self {
        case .io, .transfer, .rangesRefused, .insufficientSpace, .corruptState, .unavailable, .rootNotWritable: .failure
        case .invalidManifest, .manifestFormatTooNew, .manifestRollback, .manifestExpired, .signatureRefused, .keysRefused,
            .hashMismatch, .sizeMismatch, .archiveRefused, .treeMismatch, .publishRefused, .slowRetrieval,
            .invalidFileIndex:
            .refused
        case .locked: .locked
        case .invalidArgument: .usage
        case .releaseIncomplete(let failures):
            // Refusal wins: a release with a bad archive is a refused release, even if others also timed out.
            failures.values.contains { $0.category == .refused } ? .refused : .failure
        }
    }
}

extension OfflinePkgError: CustomStringConvertible {
    public var description: String {
        switch self {
        case .io(let path, let operation, let errno):
            "\(operation) \(path): \(errno)"
        case .invalidManifest(let source, let field, let reason):
            "invalid manifest \(source): \(field): \(reason)"
        case .manifestFormatTooNew(let source, let format):
            "manifest \(source) has format \(format), which needs a newer offlinepkg (this one reads format 1)"
        case .manifestRollback(let source, let reason):
            "rollback protection refused manifest \(source): \(reason)"
        case .manifestExpired(let source, let expires):
            "freeze protection refused manifest \(source): it expired at \(expires)"
        case .signatureRefused(let source, let reason):
            "signature check refused manifest \(source): \(reason)"
        case .keysRefused(let source, let reason):
            "keys check refused \(source): \(reason)"
        case .hashMismatch(let what, let expected, let actual):
            "sha256 mismatch for \(what): expected \(expected), got \(actual)"
        case .sizeMismatch(let what, let reason):
            "size check refused \(what): \(reason)"
        case .archiveRefused(let archive, let entry, let reason):
            // Entry names come from the archive: escape them, so a hostile name cannot drive the terminal.
            if let entry {
                "archive \(archive) refused: entry \"\(entry)\": \(reason)"
            } else {
                "archive \(archive) refused: \(reason)"
            }
        case .treeMismatch(let package, let expected, let actual):
            "tree hash mismatch for package \(package): expected \(expected), got \(actual)"
        case .transfer(let url, let failure):
            "download \(url) failed: \(failure)"
        case .rangesRefused(let url, let reason):
            "range request \(url) failed: \(reason)"
        case .slowRetrieval(let url, let protection):
            "slow retrieval protection refused \(url): \(protection)"
        case .locked(let root):
            "another sync holds the lock of \(root)"
        case .insufficientSpace(let path, let needed, let available):
            "not enough free space in \(path): needs \(needed) bytes, \(available) available"
        case .corruptState(let path, let reason):
            "unreadable cache state \(path): \(reason)"
        case .rootNotWritable(let root, let path, let operation, let errno):
            "cannot write the cache root \(root) (\(operation) \(path): \(errno))"
        case .unavailable(let reason):
            reason
        case .releaseIncomplete(let failures):
            "release not activated; \(failures.count) package(s) failed: "
                + failures.keys.sorted().map { "\($0): \(failures[$0]!)" }.joined(separator: "; ")
        case .invalidArgument(let reason):
            reason
        case .publishRefused(let reason):
            "publish refused: \(reason)"
        case .invalidFileIndex(let source, let field, let reason):
            "invalid file index \(source): \(field): \(reason)"
        }
    }
}

extension OfflinePkgError {
    /// `text` with control characters, backslashes and quotes written as escapes (`\u{1B}`, `\\`, `\"`).
    static func escaped(_ text: String) -> String {
        escaped(bytes: Array(text.utf8))
    }

    /// The same for a byte string (a path read from an archive or a folder), with every byte that is
    /// not part of valid UTF-8 written as `\xE9`: a message names exactly the bytes it saw.
    static func escaped(bytes: [UInt8]) -> String {
        var out = ""
        var parser = Unicode.UTF8.ForwardParser()
        var input = bytes.makeIterator()
        var position = 0
        while true {
            switch parser.parseScalar(from: &input) {
            case .emptyInput: return out
            case .error(let length):
                for byte in bytes[position..<position + length] {
                    out += "\\x" + (byte < 0x10 ? "0" : "") + String(byte, radix: 16)
                }
                position += length
            case .valid(let encoded):
                position += encoded.count
                let scalar = Unicode.UTF8.decode(encoded)
                switch scalar {
                case "\\": out += "\\\\"
                case "\"": out += "\\\""
                case _ where scalar.value < 0x20 || scalar.value == 0x7f || (0x80...0x9f).contains(scalar.value):
                    out += "\\u{" + String(scalar.value, radix: 16, uppercase: true) + "}"
                default: out.unicodeScalars.append(scalar)
                }
            }
        }
    }
}
