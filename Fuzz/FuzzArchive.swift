import Foundation

// Fuzz target for archive reading: any input is unpacked under a fresh staging folder with small
// limits; whatever it holds, nothing may appear outside that folder, and every file it reports exists
// inside it with the size it reports.
private let scratch: String = {
    let path = NSTemporaryDirectory() + "offlinepkg-fuzz-\(getpid())"
    try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
}()

func fuzzArchive(_ bytes: [UInt8]) {
    let input = scratch + "/input"
    let root = scratch + "/root"
    let staging = root + "/staging"
    try? FileSystem.removeTree(root)
    try? FileSystem.makeDirectories(staging)
    FileManager.default.createFile(atPath: input, contents: Data(bytes))
    let unpacker = ArchiveUnpacker(limits: UnpackLimits(maxEntries: 200, maxBytes: 4 << 20), archiveName: "fuzz")
    if let tree = try? unpacker.unpack(archivePath: input, into: staging) {
        for (path, file) in tree.files {
            precondition(ArchivePath.validate(path.bytes) == nil, "reported a path that is not clean: \(path)")
            precondition(FileSystem.fileSize(staging + "/" + path.string) == file.size, "reported file missing or resized: \(path)")
        }
    }
    precondition(FileSystem.contents(of: root) == ["staging"], "something was written outside staging")
}
