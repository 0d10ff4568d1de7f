// swift-tools-version:6.0
// A WebKitGTK 4.1 shell (Linux's WKWebView) that serves an offline package through an in-process
// URI-scheme handler, as an app links the OfflinePkg library product alone (README.md, "Connecting a webview").
//     swift build --package-path Examples/WebKitShell      (make example-webkit runs it under Xvfb)
import PackageDescription

let package = Package(
    name: "WebKitShell",
    // Named, because a path dependency is otherwise known by its folder name, which differs per checkout.
    dependencies: [.package(name: "offlinepkg", path: "../..")],
    targets: [
        // The WebKitGTK C API, imported by the WebKitShell module alone.
        .systemLibrary(name: "CWebKitGTK", pkgConfig: "webkit2gtk-4.1", providers: [.apt(["libwebkit2gtk-4.1-dev"])]),
        .executableTarget(
            name: "WebKitShell", dependencies: ["CWebKitGTK", .product(name: "OfflinePkg", package: "offlinepkg")]),
    ],
    swiftLanguageModes: [.v6]
)
