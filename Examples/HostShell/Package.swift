// swift-tools-version:6.0
// A minimal host shell: how an app links the OfflinePkg library product alone.
//     swift build --package-path Examples/HostShell
import PackageDescription

let package = Package(
    name: "HostShell",
    // Named, because a path dependency is otherwise known by its folder name, which differs per checkout.
    dependencies: [.package(name: "offlinepkg", path: "../..")],
    targets: [
        .executableTarget(name: "HostShell", dependencies: [.product(name: "OfflinePkg", package: "offlinepkg")])
    ],
    swiftLanguageModes: [.v6]
)
