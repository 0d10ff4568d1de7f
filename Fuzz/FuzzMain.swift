// libFuzzer entry point for offlinepkg's parsers. Not part of Package.swift (SwiftPM has no fuzzer
// product type): Fuzz/build.sh compiles these files with the OfflinePkg sources into one binary, and
// FUZZ_TARGET picks the parser: manifest, signature, keys, archive or url. scripts/fuzz runs them.
#if canImport(Glibc)
import Glibc
#endif

private let target: String = getenv("FUZZ_TARGET").map { String(cString: $0) } ?? "manifest"

@_cdecl("LLVMFuzzerTestOneInput")
public func offlinepkgFuzzTestOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    // The normaliser reads the fuzzer's own buffer (a read past its end is ASan's to see): no copy.
    if target == "url" {
        fuzzLookupURL(data, size)
        return 0
    }
    let bytes = size > 0 && data != nil ? Array(UnsafeBufferPointer(start: data, count: size)) : []
    switch target {
    case "signature": fuzzSignature(bytes)
    case "keys": fuzzKeys(bytes)
    case "archive": fuzzArchive(bytes)
    default: fuzzManifest(bytes)
    }
    return 0
}
