import ArgumentParser
import Foundation
import Logging
import SyncServer

/// Where `bucketfs user` finds the accounts: a data directory or a PostgreSQL database.
struct ServerDataOptions: ParsableArguments {
    @Option(help: "The server's data directory.")
    var data: String?

    @Option(help: "The server's PostgreSQL database instead: postgres://USER@HOST:PORT/DATABASE (default: $BUCKETFS_DATABASE_URL).")
    var database: String?

    func validate() throws {
        if data != nil, database != nil { throw ValidationError("--data and --database exclude each other") }
        if data == nil, databaseURL == nil { throw ValidationError("give --data DIR or --database postgres://USER@HOST:PORT/DATABASE") }
    }

    var databaseURL: String? { Self.databaseURL(data: data, database: database) }

    /// --database, or BUCKETFS_DATABASE_URL when neither --data nor --database is given.
    static func databaseURL(data: String?, database: String?) -> String? {
        if let database { return database }
        guard data == nil, let url = ProcessInfo.processInfo.environment["BUCKETFS_DATABASE_URL"], !url.isEmpty else { return nil }
        return url
    }

    func open() async throws -> ServerBackend {
        var logger = Logger(label: "bucketfs.user")
        logger.logLevel = .warning
        return try await ServerBackend.open(data: data, databaseURL: databaseURL, logger: logger)
    }
}

/// `bucketfs user`: manage accounts straight on a server's data directory (no server needed).
struct User: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Manage the accounts of a local sync server, offline, on its data directory.",
        subcommands: [Add.self, Token.self]
    )

    /// `bucketfs user add`: create an account and print its first access token.
    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create a user and print a new access token on stdout.",
            discussion: "Without --password, the password is read from the first line of standard input."
        )

        @OptionGroup var place: ServerDataOptions

        @Option(help: "The password (visible in the process list; prefer standard input).")
        var password: String?

        @Argument(help: "The username (e.g. an email address; must not parse as JSON).")
        var username: String

        func run() async throws {
            let password = try self.password ?? Self.readPassword()
            let store = try await place.open()
            defer { store.close() }
            let credentials = try await store.accounts.createUser(username: username, password: password)
            FileHandle.standardError.write(Data("created user \(credentials.username) (userid \(credentials.userID))\n".utf8))
            print(credentials.accessToken)
        }

        private static func readPassword() throws -> String {
            guard let line = readLine(strippingNewline: true), !line.isEmpty else {
                throw ValidationError("no password: pass --password or write it on standard input")
            }
            return line
        }
    }

    /// `bucketfs user token`: issue another access token for an existing user.
    struct Token: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print a new access token for an existing user.")

        @OptionGroup var place: ServerDataOptions

        @Argument(help: "The username.")
        var username: String

        func run() async throws {
            let store = try await place.open()
            defer { store.close() }
            print(try await store.accounts.issueToken(username: username).accessToken)
        }
    }
}
