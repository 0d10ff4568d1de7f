import FoundationEssentials
import OfflinePkg
import OfflinePkgServer

/// `offlinepkg reports serve` (docs/protocol.md#install-reports): takes devices' POSTs of install reports into a
/// `ReportsDatabase`.
///
/// - `POST` (any path, so a proxy may forward `/reports` as it is): a JSON array of events, at most
///   `maximumBodyBytes`. 200 `{"stored": N, "duplicates": M}` once the batch is committed; 400 naming the
///   first value that breaks a rule (nothing of the batch is stored); 413 for a larger body; 503 with
///   `Retry-After` when the database is locked or the disk full (the device keeps its events and sends
///   them again at its next sync).
/// - `GET` / `HEAD`: 200 with how many events and devices are stored, for a load balancer's health check.
package final class ReportsCollector: Sendable {
    /// The largest body taken: a device's queue holds at most 256 KiB, a proxy's batch may hold more.
    package static let maximumBodyBytes = 1 << 20

    package let database: ReportsDatabase
    private let server: EndpointServer

    package init(database: ReportsDatabase, host: String = "127.0.0.1", port: UInt16 = 0, lanes: Int = 2) throws {
        self.database = database
        server = try EndpointServer(host: host, port: port, lanes: lanes, maximumBodyBytes: Self.maximumBodyBytes) { request in
            Self.answer(request, database: database)
        }
    }

    package func start() throws { try server.start() }

    /// Stops taking requests (those in progress finish) and folds the log into the database file.
    package func stop() {
        server.stop()
        database.checkpoint()
    }

    package var url: URL { server.url }
    package var port: UInt16 { server.port }

    static func answer(_ request: EndpointServer.Request, database: ReportsDatabase) -> EndpointServer.Response {
        switch request.method {
        case "POST":
            let events: [ReportEvent]
            do {
                events = try EventReader.events(request.body)
            } catch {
                return .text(400, "bad request: \(error)")
            }
            do {
                let stored = try database.store(events)
                return EndpointServer.Response(
                    status: 200, headers: [("Content-Type", "application/json")],
                    body: Array("{\"stored\":\(stored.stored),\"duplicates\":\(stored.duplicates)}\n".utf8))
            } catch let failure as DatabaseFailure where failure.isTemporary {
                return .text(503, "not stored, send again later: \(failure)", headers: [("Retry-After", "30")])
            } catch {
                return .text(500, "not stored: \(error)")
            }
        case "GET", "HEAD":
            guard let counts = try? database.counts() else { return .text(503, "the database cannot be read now") }
            return .text(200, "offlinepkg reports collector: \(counts.events) events from \(counts.devices) devices")
        default:
            return .text(
                405, "method not allowed: POST install reports, GET for a health check", headers: [("Allow", "GET, HEAD, POST")])
        }
    }
}
