/// What the library reaches outside the process: the wall clock and the network. One value, handed to
/// an updater, a repair or the runtime cache and carried by the command line's context, so a test
/// replaces both at once. `live` is the system clock and libcurl.
package struct World: Sendable {
    package var clock: WallClock
    package var transport: any Transport

    package init(clock: WallClock = .system, transport: any Transport = CurlTransport()) {
        self.clock = clock
        self.transport = transport
    }

    package static var live: World { World() }
}
