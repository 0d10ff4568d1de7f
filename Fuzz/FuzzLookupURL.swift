// Fuzz target for the URL normaliser in Sources/OfflinePkg/Lookup (see FuzzMain.swift).
//
// Its fast path reads and writes sixteen bytes at a time (CByteLanes), and the last block of a path
// overlaps the one before it: the input is the fuzzer's own buffer, so a read past its end is an
// AddressSanitizer report. For any input:
// - the fast path, when it answers, gives the careful path's key;
// - the automatic choice gives the careful path's key;
// - a key is never longer than the URL.

func fuzzLookupURL(_ data: UnsafePointer<UInt8>?, _ size: Int) {
    let input = UnsafeBufferPointer(start: size > 0 ? data : nil, count: size)
    let careful = LookupURL.key(utf8: input, using: .carefulOnly)
    let automatic = LookupURL.key(utf8: input, using: .commonFormThenCareful)
    precondition(automatic == careful, "the normaliser's choice of path changed the key")
    if let fast = LookupURL.key(utf8: input, using: .commonFormOnly) {
        precondition(fast == careful, "the fast path and the careful path disagree")
    }
    if let careful { precondition(careful.count <= size, "a key longer than its URL") }
}
