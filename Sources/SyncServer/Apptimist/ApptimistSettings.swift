/// The Apptimist App-Server a `bucketfs serve --apptimist SERVICE` answers for: the service
/// name is the WebSocket's path (`ws://HOST:PORT/SERVICE?<device key hex>`); a plain GET of the
/// same path answers the service key document (`ApptimistServiceKey`).
public struct ApptimistSettings: Sendable, Hashable {
    public var service: String
    /// How long a LOGIN's file lock lasts without its WRITE (or REMOVE) before another
    /// connection may take it; a closed connection's locks go at once.
    public var lockLifetime: Duration = .seconds(300)

    public init(service: String) {
        self.service = service
    }

    /// Service names are one path segment: 1-64 of [A-Za-z0-9_-], and not a path the server
    /// already routes (`1`, `sock`, `socket.io` and Telepat's prefixes).
    public static func isValidName(_ name: String) -> Bool {
        let reserved: Set<String> = ["1", "sock", "socket.io", "device", "user", "context", "object"]
        return (1 ... 64).contains(name.utf8.count) && !reserved.contains(name) && name.utf8.allSatisfy { byte in
            (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A) || byte == 0x5F || byte == 0x2D
        }
    }
}
