// swift-tools-version:6.0
import PackageDescription

// A release CLI carries the Swift runtime and Foundation inside it: it starts faster (no symbol
// lookups across the toolchain's shared libraries, most of what a `lookup` costs) and runs on a
// device that has only the Debian libraries, no Swift toolchain. `-static-stdlib` is only the link
// step of `swift build --static-swift-stdlib`, so the archives that Foundation's own static modules
// would have named are named here. Debug builds (the tests', `make demo`'s) link them shared, and so does
// a release build with OFFLINEPKG_SHARED_SWIFT=1 (a toolchain without `usr/lib/swift_static`).
let staticSwiftRuntime: [LinkerSetting] = Context.environment["OFFLINEPKG_SHARED_SWIFT"] == "1" ? [] : [
    .unsafeFlags(
        [
            "-static-stdlib", "-l_CFURLSessionInterface", "-lcurl", "-lCoreFoundation", "-l_FoundationICU",
            "-l_FoundationCShims", "-l_FoundationCollections", "-lstdc++",
        ],
        .when(platforms: [.linux], configuration: .release)
    )
]

let package = Package(
    name: "offlinepkg",
    products: [
        .library(name: "OfflinePkg", targets: ["OfflinePkg"]),
        .library(name: "OfflinePkgServer", targets: ["OfflinePkgServer"]),
        .executable(name: "offlinepkg", targets: ["offlinepkg"]),
    ],
    targets: [
        // System libraries from Debian. Each is imported by exactly one Swift module.
        .systemLibrary(name: "CArchive", pkgConfig: "libarchive", providers: [.apt(["libarchive-dev"])]),
        .systemLibrary(name: "CCrypto", pkgConfig: "libcrypto", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CCurl", pkgConfig: "libcurl", providers: [.apt(["libcurl4-openssl-dev"])]),
        .systemLibrary(name: "CMicroHTTPD", pkgConfig: "libmicrohttpd", providers: [.apt(["libmicrohttpd-dev"])]),
        // Imported by the publisher only (ZstdFrames.swift writes the chunked layout's frames).
        .systemLibrary(name: "CZstd", pkgConfig: "libzstd", providers: [.apt(["libzstd-dev"])]),
        // Imported by the reports collector only (OfflinePkgReports): a host never links SQLite.
        .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),

        .target(name: "CSystemShims"),
        // The URL normaliser's sixteen-byte scans (SSE2, or two 64-bit words elsewhere): header only.
        .target(name: "CByteLanes"),
        .target(name: "OfflinePkg", dependencies: ["CArchive", "CByteLanes", "CCrypto", "CCurl", "CSystemShims"]),
        // The publisher (archives, manifest editing, signing, deltas): the CLI links it, a host never does.
        .target(name: "OfflinePkgPublish", dependencies: ["OfflinePkg", "CZstd"]),
        .target(name: "OfflinePkgServer", dependencies: ["OfflinePkg", "CMicroHTTPD"]),
        // The reports collector (`reports serve/import/show`, docs/protocol.md#install-reports): publisher-side, on SQLite and the
        // server's HTTP machinery; the CLI links it, a host never does.
        .target(name: "OfflinePkgReports", dependencies: ["OfflinePkg", "OfflinePkgServer", "CSQLite"]),
        .target(name: "OfflinePkgCLI", dependencies: ["OfflinePkg", "OfflinePkgPublish", "OfflinePkgServer", "OfflinePkgReports"]),
        .executableTarget(name: "offlinepkg", dependencies: ["OfflinePkgCLI"], linkerSettings: staticSwiftRuntime),
        // `PackageStore.resolve` timed in process, for Benchmarks/bench's `resolve` row: public API only.
        .executableTarget(name: "ResolveBenchmark", dependencies: ["OfflinePkg"], path: "Benchmarks/Resolve"),

        // The test kit: temporary roots, real servers (nginx, a fault server), fixtures, and the command line
        // run in process (`InProcessCLI`) or as the binary.
        .target(name: "OfflinePkgTestSupport", dependencies: ["OfflinePkg", "OfflinePkgCLI"], path: "Tests/OfflinePkgTestSupport"),
        .testTarget(name: "OfflinePkgTests", dependencies: ["OfflinePkg", "OfflinePkgPublish", "OfflinePkgTestSupport"]),
        .testTarget(name: "OfflinePkgPublishTests", dependencies: ["OfflinePkgPublish", "OfflinePkg", "OfflinePkgTestSupport"]),
        .testTarget(name: "OfflinePkgCLITests", dependencies: ["OfflinePkgCLI", "OfflinePkgTestSupport"]),
        .testTarget(name: "OfflinePkgServerTests", dependencies: ["OfflinePkgServer", "OfflinePkg", "OfflinePkgTestSupport"]),
        .testTarget(name: "OfflinePkgReportsTests", dependencies: ["OfflinePkgReports", "OfflinePkg", "OfflinePkgTestSupport"]),
    ],
    swiftLanguageModes: [.v6]
)
