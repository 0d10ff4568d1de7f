import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

/// The root's state files are read without `JSONDecoder` when they are what the encoder writes, to the
/// same values; anything else is `JSONDecoder`'s to read, errors included.
@Suite("State files read without the decoder")
struct StateFileReaderTests {
    /// `state.json`, `active.json` and `origins.json` as the previous release wrote them after a sync.
    static let writtenState = #"""
        {
          "acceptedManifestSHA256" : "43ef35d4231e29b94c93379e03607e1262a811ef1f2ba4800c22880e8949c872",
          "acceptedSequence" : 1,
          "channels" : {
            "http://127.0.0.1:47573/repo/manifest.json" : {
              "sequence" : 1,
              "sha256" : "43ef35d4231e29b94c93379e03607e1262a811ef1f2ba4800c22880e8949c872"
            }
          },
          "consecutiveFailures" : 0,
          "etag" : "\"6b13adb3-2f1\"",
          "evaluatedInputs" : "shell=*;keys=;limits=1000000/4294967296",
          "heldBack" : [

          ],
          "lastAttempt" : "2026-12-05T06:23:00Z",
          "lastChanges" : [
            {
              "bytes" : 554714,
              "id" : "app",
              "to" : "1",
              "via" : "archive"
            }
          ],
          "lastCheck" : "2026-12-05T06:23:00Z",
          "lastModified" : "Sat, 05 Dec 2026 06:22:43 GMT",
          "lastSuccess" : "2026-12-05T06:23:00Z",
          "manifestURL" : "http://127.0.0.1:47573/repo/manifest.json"
        }
        """#
    static let writtenActive = #"""
        {
          "current" : {
            "activatedAt" : "2026-12-05T06:22:44Z",
            "generation" : 1,
            "packages" : [
              {
                "archive" : {
                  "files" : {
                    "sha256" : "76761679452fc5ea3795fe585758cd28b003800574fee8f63a9c5a245b0b31a0",
                    "size" : 43194,
                    "url" : "files/76761679452fc5ea3795fe585758cd28b003800574fee8f63a9c5a245b0b31a0.json.zst"
                  },
                  "sha256" : "6acd48cfacddec3fb3cc6a234bea8bd53b29d9de55430452f15101ff05e869d4",
                  "size" : 554714,
                  "url" : "archives/app/1/app-1.tar.zst"
                },
                "entry" : "index.html",
                "id" : "app",
                "routes" : [
                  "https://m.example.com/"
                ],
                "tree" : "4e855c1b050a22c1fcd1e84e3f8a893d56760badfe3db7115b27bc80db20ae10",
                "version" : "1"
              }
            ],
            "sequence" : 1
          }
        }
        """#
    static let writtenOrigins = #"""
        {
          "http://127.0.0.1:47573" : {
            "checked" : 1796451763.6268053,
            "http" : "http/1.1",
            "server" : "nginx/1.22.1"
          }
        }
        """#

    /// Every field of every type filled: a state after rollbacks, a failure and a keys document.
    static var fullState: SyncState {
        var state = SyncState()
        let time = Date(timeIntervalSince1970: 1_796_451_763)
        state.manifestURL = "https://cdn.example.com/m.json"
        state.etag = "\"e\u{301}\""
        state.lastModified = "Sat, 05 Dec 2026 06:22:43 GMT"
        state.lastCheck = time
        state.acceptedSequence = 7
        state.acceptedManifestSHA256 = "ab"
        state.evaluatedInputs = "shell=*;keys=;limits=1/2"
        state.heldBack = [HeldBackRelease(id: "app", version: "2", reason: "needs shell 3")]
        state.reverted = ["app": "2", "docs": "1.1"]
        state.rolledBack = ["app": "2"]
        state.channels = [
            "https://cdn.example.com/m.json": AcceptedManifest(sequence: 7, sha256: "ab", keysVersion: 2, manifestKeys: "k"),
            "https://staging.example.com/m.json": AcceptedManifest(sequence: 3, sha256: nil),
        ]
        state.lastAttempt = time
        state.lastSuccess = time.addingTimeInterval(-60)
        state.consecutiveFailures = 2
        state.lastError = SyncFailure(time: time, exitStatus: 4, message: "signature refused: \"x\"\n")
        state.lastChanges = [
            PackageChange(id: "app", from: "1", to: "2", via: .delta, notes: "fixes", mandatory: true, bytes: 5_000_000_000),
            PackageChange(id: "docs", from: "1", to: nil, via: nil, notes: nil, mandatory: nil),
        ]
        var trust = StoredTrust(anchor: .keys([]), since: time)
        trust.document = "ZG9j"
        trust.removed = ["RWQ": 3]
        trust.baselineReset = BaselineReset(keysVersion: 2, sequence: 6, time: time)
        state.trust = ["https://cdn.example.com/m.json": trust]
        return state
    }

    static var fullActive: ActiveRecord {
        var package = try! JSONCoding.decoder.decode(ActiveRecord.self, from: Data(writtenActive.utf8)).current.packages[0]
        package.fallback = "offline.html"
        package.notes = "notes"
        package.mandatory = false
        var previous = package
        previous.archive?.files = nil
        let current = ActiveSet(
            generation: 4, sequence: 9, activatedAt: Date(timeIntervalSince1970: 1_796_451_000), packages: [package, previous])
        return ActiveRecord(current: current, previous: .empty, previousWasRolledBack: true)
    }

    /// What the fast reader makes of `text`, and what `JSONDecoder` does: both must read it, alike.
    func readBoth<T: StateFileReadable & Equatable>(_ type: T.Type, _ text: String) throws -> (fast: T, decoded: T) {
        let fast: T = try StateValue.object(JSONDocument(parsing: Array(text.utf8)).root)
        return (fast, try JSONCoding.decoder.decode(T.self, from: Data(text.utf8)))
    }

    @Test func filesThePreviousReleaseWroteReadWithoutTheDecoder() throws {
        let state = try readBoth(SyncState.self, Self.writtenState)
        #expect(state.fast == state.decoded)
        #expect(state.fast.lastChanges?.first?.via == .archive && state.fast.heldBack == [])
        let active = try readBoth(ActiveRecord.self, Self.writtenActive)
        #expect(active.fast == active.decoded)
        #expect(active.fast.current.packages.first?.archive?.files?.size == 43194)
        let origins = try StateValue.dictionary(
            JSONDocument(parsing: Array(Self.writtenOrigins.utf8)).root, StateValue.object as (JSONValue) throws -> OriginRanges.Record)
        #expect(origins == (try JSONCoding.decoder.decode([String: OriginRanges.Record].self, from: Data(Self.writtenOrigins.utf8))))
        #expect(origins.first?.value.checked == 1796451763.6268053)
    }

    @Test func everyFieldTheEncoderWritesReadsBack() throws {
        let state = try readBoth(SyncState.self, String(decoding: JSONCoding.encode(Self.fullState), as: UTF8.self))
        #expect(state.fast == Self.fullState && state.decoded == Self.fullState)
        let active = try readBoth(ActiveRecord.self, String(decoding: JSONCoding.encode(Self.fullActive), as: UTF8.self))
        #expect(active.fast == Self.fullActive && active.decoded == Self.fullActive)
        // The empty set's null `activatedAt` is 1970, as `init(from:)` reads it.
        #expect(active.fast.previous == .empty)
    }

    /// Each reader names every stored property of its type: a field added to a type and not to its
    /// reader would send every file to the decoder, or be dropped if the keys were not checked.
    @Test func eachReaderKnowsEveryStoredProperty() throws {
        let state = Self.fullState
        let active = Self.fullActive
        let package = active.current.packages[0]
        let samples: [(any StateFileReadable.Type, Any)] = [
            (SyncState.self, state), (AcceptedManifest.self, state.channels!.first!.value),
            (HeldBackRelease.self, state.heldBack![0]), (SyncFailure.self, state.lastError!),
            (PackageChange.self, state.lastChanges![0]), (StoredTrust.self, state.trust!.first!.value),
            (BaselineReset.self, state.trust!.first!.value.baselineReset!), (ActiveRecord.self, active),
            (ActiveSet.self, active.current), (InstalledPackage.self, package), (RemoteFile.self, package.archive!),
            (FileIndexReference.self, package.archive!.files!),
            (OriginRanges.Record.self, OriginRanges.Record(support: .single, server: nil, checked: 0, http: nil)),
        ]
        for (type, sample) in samples {
            let properties = Set(Mirror(reflecting: sample).children.compactMap(\.label))
            #expect(type.stateKeys == properties, "\(type)")
        }
    }

    /// `state.json` as `StateJSON` writes it reads back the same with `JSONDecoder` and with the fast
    /// reader, every field filled, and is laid out as `JSONEncoder` lays it out.
    @Test func theStateIsWrittenAsTheDecoderReadsIt() throws {
        let state = Self.fullState
        for property in Mirror(reflecting: state).children {
            #expect(!"\(property.value)".hasPrefix("nil"), "fullState leaves \(property.label ?? "?") out")
        }
        let written = state.stateJSON.text
        #expect(try JSONCoding.decoder.decode(SyncState.self, from: Data(written)) == state)
        let fast: SyncState = try StateValue.object(JSONDocument(parsing: written).root)
        #expect(fast == state)
        #expect(String(decoding: written, as: UTF8.self) == String(decoding: JSONCoding.encode(state), as: UTF8.self))
    }

    @Test(arguments: ["\"\\/\u{0}\u{1f}\u{7f}\u{8}\u{c}\n\r\t", "\u{2028}é😀 e\u{301}", ""])
    func stringsAreWrittenAsJSONEncoderWritesThem(text: String) throws {
        var state = SyncState()
        state.etag = text
        state.reverted = [text: text]
        state.heldBack = []
        state.rolledBack = [:]
        let written = state.stateJSON.text
        #expect(try JSONCoding.decoder.decode(SyncState.self, from: Data(written)) == state)
        let fast: SyncState = try StateValue.object(JSONDocument(parsing: written).root)
        #expect(fast == state)
        #expect(String(decoding: written, as: UTF8.self) == String(decoding: JSONCoding.encode(state), as: UTF8.self))
    }

    /// What the encoder does not write goes to `JSONDecoder`: the same value, or its error.
    @Test(arguments: [
        // A key a newer build added: ignored, as before.
        (#"{"etag":"a","addedLater":{"x":[1]}}"#, true),
        // A date another tool wrote, with a fraction and an offset.
        (#"{"lastCheck":"2026-12-05T07:23:00.5+01:00"}"#, true),
        // Two equal keys: the decoder keeps one.
        (#"{"etag":"a","etag":"b"}"#, true),
        // An integer written as a double.
        (#"{"acceptedSequence":1.0}"#, nil),
        (#"{"acceptedSequence":"1"}"#, false),
        (#"{"lastChanges":[{"id":"app","via":"teleport"}]}"#, false),
        (#"{"etag":"a""#, false),
        ("", false),
    ] as [(String, Bool?)])
    func anythingElseIsTheDecodersToRead(text: String, reads: Bool?) throws {
        let root = try TemporaryDirectory(prefix: "state-fallback")
        let layout = CacheLayout(root: root.path)
        try FileSystem.writeAtomically(Array(text.utf8), to: layout.state)
        let decoded = Result { try JSONCoding.decoder.decode(SyncState.self, from: Data(text.utf8)) }
        let loaded = Result { try JSONCoding.load(SyncState.self, from: layout.state) }
        switch (decoded, loaded) {
        case (.success(let decoded), .success(let loaded)):
            #expect(reads != false)
            #expect(loaded == decoded)
        case (.failure(let error), .failure(let loadError)):
            #expect(reads != true)
            #expect("\(loadError)" == "\(OfflinePkgError.corruptState(path: layout.state, reason: "\(error)"))")
            #expect("\(loadError)".contains(layout.state))
        default:
            Issue.record("the decoder gave \(decoded), the load \(loaded)")
        }
    }
}
