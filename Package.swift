// swift-tools-version:6.0
import PackageDescription

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

        .target(name: "CSystemShims"),
        .target(name: "OfflinePkg", dependencies: ["CArchive", "CCrypto", "CCurl", "CSystemShims"]),
        // The publisher (archives, manifest editing, signing, deltas): the CLI links it, a host never does.
        .target(name: "OfflinePkgPublish", dependencies: ["OfflinePkg", "CZstd"]),
        .target(name: "OfflinePkgServer", dependencies: ["OfflinePkg", "CMicroHTTPD"]),
        .target(name: "OfflinePkgCLI", dependencies: ["OfflinePkg", "OfflinePkgPublish", "OfflinePkgServer"]),
        .executableTarget(name: "offlinepkg", dependencies: ["OfflinePkgCLI"]),
        // `swift build -c release --product OfflinePkgBenchmarks`: resolve ns/op on a ~4,000-file set.
        .executableTarget(name: "OfflinePkgBenchmarks", dependencies: ["OfflinePkg", "OfflinePkgTestSupport"]),

        .target(name: "OfflinePkgTestSupport", dependencies: ["OfflinePkg"], path: "Tests/OfflinePkgTestSupport"),
        .testTarget(name: "OfflinePkgTests", dependencies: ["OfflinePkg", "OfflinePkgPublish", "OfflinePkgTestSupport"]),
        .testTarget(name: "OfflinePkgCLITests", dependencies: ["OfflinePkgCLI", "OfflinePkgTestSupport"]),
        .testTarget(name: "OfflinePkgServerTests", dependencies: ["OfflinePkgServer", "OfflinePkg", "OfflinePkgTestSupport"]),
    ],
    swiftLanguageModes: [.v6]
)
