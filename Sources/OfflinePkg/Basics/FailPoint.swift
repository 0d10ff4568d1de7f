import FoundationEssentials

#if canImport(Glibc)
import Glibc
#endif

/// Named points where a test can have the process die with SIGKILL, to prove crash safety at each
/// stage of a sync: `OFFLINEPKG_FAILPOINT=<name>` kills the process the first time it passes there;
/// `<name>:stop` stops it there instead (SIGSTOP), so that a test can signal it at that very point,
/// then let it go on. Documented in the man page; inert when the variable is unset.
package enum FailPoint: String, Sendable {
    case afterManifest = "after-manifest"
    case midDownload = "mid-download"
    case afterUnpack = "after-unpack"
    /// A tree renamed into `trees/`, its top folder not yet read-only.
    case beforeSeal = "before-seal"
    /// A file of an unpacking tree just linked into `content/`, the tree still in staging; or, at a
    /// sync's start, a file of an installed tree whose content was pending (`takeInPendingTrees`).
    case contentLink = "content-link"
    /// A file of an unpacking tree just made a link to content this sync holds already, before anything
    /// was written at its name (`ContentStore.linkHeld`), the tree still in staging.
    case heldLink = "held-link"
    case beforeSwitch = "before-switch"
    case afterSwitch = "after-switch"
    /// A newer keys version verified (docs/protocol.md#keys-documents), the root's state not written yet.
    case keysVerified = "keys-verified"
    /// The newer keys version and the rollback baseline it implies written, in one atomic write.
    case keysSaved = "keys-saved"
    /// A collection (a sync's last stage, `gc`): one unused tree removed, the content only it linked not
    /// collected yet.
    case gcAfterTree = "gc-after-tree"
    /// `publish`: every archive and delta written under `.tmp/`, none renamed to its published name yet.
    case publishBeforeRename = "publish-before-rename"
    /// `publish`: the first file of a site written into the archive under `.tmp/`.
    case publishPacking = "publish-packing"

    // One variable, read as such: `ProcessInfo.environment` builds a dictionary of every variable.
    private static let armed: String? = getenv("OFFLINEPKG_FAILPOINT").map { String(cString: $0) }

    package func hit() {
        if FailPoint.armed == rawValue { kill(getpid(), SIGKILL) }
        if FailPoint.armed == rawValue + ":stop" { kill(getpid(), SIGSTOP) }
    }
}
