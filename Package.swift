// swift-tools-version:6.0
import PackageDescription

// A release CLI carries the Swift runtime and FoundationEssentials inside it: it starts without symbol
// lookups across the toolchain's shared libraries (most of what a `lookup` costs) and runs on a device
// that has only the Debian libraries, no Swift toolchain. No target a device runs imports full
// Foundation (ICU's data, the corelibs; `scripts/check-targets` keeps it so), which keeps the stripped
// binary under a third of the size. `-static-stdlib` is only the link step of `swift build --static-swift-stdlib`, so the archives
// that FoundationEssentials' own static module would have named are named here. Debug builds (the
// tests', `make demo`'s) link them shared, and so does a release build with OFFLINEPKG_SHARED_SWIFT=1
// (a toolchain without `usr/lib/swift_static`).
//
// The release binary is linked by lld, whose layout maps less of the binary at start than gold's
// (docs/design.md, "Start-up and memory"). Packed relative relocations (DT_RELR) would save about as
// much again but need glibc 2.36 on the device; devices on glibc 2.35 (Ubuntu 22.04) keep running it.
// The C++ library the Swift runtime needs is linked in too: the toolchain's link line asks for
// `-lstdc++`, which Sources/offlinepkg/link answers with a linker script naming the static archive,
// so a process no longer loads libstdc++.so and looks up its 3,300 symbols to start (half of what
// `--version` executed). `--exclude-libs` keeps its symbols out of the binary's exports: where
// libarchive brings libstdc++.so in (through libxml2 and ICU), each copy binds to itself.
let staticSwiftRuntime: [LinkerSetting] = Context.environment["OFFLINEPKG_SHARED_SWIFT"] == "1" ? [] : [
    .unsafeFlags(
        [
            "-static-stdlib", "-l_FoundationCShims", "-l_FoundationCollections",
            "-use-ld=lld",
            // The functions a device's commands run, first and together (Sources/offlinepkg/hot-code.order,
            // written by scripts/hot-code-order): the kernel maps 64 KiB of the binary around each page
            // fault, so code spread over the whole text makes nearly all of it resident.
            "-Xlinker", "--symbol-ordering-file=\(Context.packageDirectory)/Sources/offlinepkg/hot-code.order",
            "-Xlinker", "--no-warn-symbol-ordering",
            // `-lstdc++` finds link/libstdc++.so first, a linker script for libstdc++.a, whose symbols
            // the binary keeps to itself (the toolchain's `--exclude-libs ALL` says so too; this line
            // does not depend on it).
            "-L\(Context.packageDirectory)/Sources/offlinepkg/link",
            "-Xlinker", "--exclude-libs", "-Xlinker", "libstdc++.a",
        ],
        .when(platforms: [.linux], configuration: .release)
    )
]

let package = Package(
    name: "offlinepkg",
    products: [
        .library(name: "OfflinePkg", targets: ["OfflinePkg"]),
        // `PackageStore.cachedResponse(for: URLRequest)`: links Foundation and FoundationNetworking.
        .library(name: "OfflinePkgURLRequest", targets: ["OfflinePkgURLRequest"]),
        .library(name: "OfflinePkgServer", targets: ["OfflinePkgServer"]),
        .executable(name: "offlinepkg", targets: ["offlinepkg"]),
    ],
    targets: [
        // Debian's libraries, each imported by exactly one Swift module. libarchive, libcrypto, libcurl,
        // libmicrohttpd and libsqlite3 are C targets: the binary is not linked with them; their functions
        // are stubs that load the library at its first call (`CSystemShims.h`), so a `lookup` or a `status`
        // maps none of the forty libraries they bring, and a no-op sync libcurl's alone (docs/design.md,
        // "Start-up and memory").
        // Their headers come from libarchive-dev, libssl-dev, libcurl4-openssl-dev and libmicrohttpd-dev.
        .target(name: "CArchive", dependencies: ["CSystemShims"]),
        .target(name: "CCrypto", dependencies: ["CSystemShims"]),
        .target(name: "CCurl", dependencies: ["CSystemShims"]),
        .target(name: "CMicroHTTPD", dependencies: ["CSystemShims"]),
        // Imported by the publisher only (ZstdFrames.swift writes the chunked layout's frames).
        .systemLibrary(name: "CZstd", pkgConfig: "libzstd", providers: [.apt(["libzstd-dev"])]),
        // Imported by the reports collector only (OfflinePkgReports): a host never links SQLite, and the CLI
        // loads it as the four above (headers from libsqlite3-dev).
        .target(name: "CSQLite", dependencies: ["CSystemShims"]),

        .target(name: "CSystemShims"),
        // The URL normaliser's sixteen-byte scans (SSE2, or two 64-bit words elsewhere): header only.
        .target(name: "CByteLanes"),
        .target(name: "OfflinePkg", dependencies: ["CArchive", "CByteLanes", "CCrypto", "CCurl", "CSystemShims"]),
        // The URL hook's URLRequest form, for a host that opts into Foundation; the CLI never links it.
        .target(name: "OfflinePkgURLRequest", dependencies: ["OfflinePkg"]),
        // The publisher (archives, manifest editing, signing, deltas): the CLI links it, a host never does.
        .target(name: "OfflinePkgPublish", dependencies: ["OfflinePkg", "CZstd"]),
        .target(name: "OfflinePkgServer", dependencies: ["OfflinePkg", "CMicroHTTPD"]),
        // The reports collector (`reports serve/import/show`, docs/protocol.md#install-reports): publisher-side, on SQLite and the
        // server's HTTP machinery; the CLI links it, a host never does.
        .target(name: "OfflinePkgReports", dependencies: ["OfflinePkg", "OfflinePkgServer", "CSQLite"]),
        .target(name: "OfflinePkgCLI", dependencies: ["OfflinePkg", "OfflinePkgPublish", "OfflinePkgServer", "OfflinePkgReports"]),
        .executableTarget(
            name: "offlinepkg", dependencies: ["OfflinePkgCLI"], exclude: ["hot-code.order", "link"], linkerSettings: staticSwiftRuntime),
        // `PackageStore.resolve` timed in process, for Benchmarks/bench's `resolve` row: public API only.
        .executableTarget(name: "ResolveBenchmark", dependencies: ["OfflinePkg"], path: "Benchmarks/Resolve"),

        // The test kit: temporary roots, real servers (nginx, a fault server), fixtures, and the command line
        // run in process (`InProcessCLI`) or as the binary.
        .target(name: "OfflinePkgTestSupport", dependencies: ["OfflinePkg", "OfflinePkgCLI"], path: "Tests/OfflinePkgTestSupport"),
        .testTarget(
            name: "OfflinePkgTests",
            dependencies: ["OfflinePkg", "OfflinePkgPublish", "OfflinePkgTestSupport", "OfflinePkgURLRequest"]),
        .testTarget(name: "OfflinePkgPublishTests", dependencies: ["OfflinePkgPublish", "OfflinePkg", "OfflinePkgTestSupport"]),
        .testTarget(name: "OfflinePkgCLITests", dependencies: ["OfflinePkgCLI", "OfflinePkgTestSupport"]),
        .testTarget(name: "OfflinePkgServerTests", dependencies: ["OfflinePkgServer", "OfflinePkg", "OfflinePkgTestSupport"]),
        .testTarget(name: "OfflinePkgReportsTests", dependencies: ["OfflinePkgReports", "OfflinePkg", "OfflinePkgTestSupport"]),
    ],
    swiftLanguageModes: [.v6]
)
