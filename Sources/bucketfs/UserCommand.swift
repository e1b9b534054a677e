import ArgumentParser
import Foundation
import SyncServer

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

        @Option(help: "The server's data directory.")
        var data: String

        @Option(help: "The password (visible in the process list; prefer standard input).")
        var password: String?

        @Argument(help: "The username (e.g. an email address; must not parse as JSON).")
        var username: String

        func run() async throws {
            let password = try self.password ?? Self.readPassword()
            let store = try ServerStore(directory: data)
            let credentials = try await store.createUser(username: username, password: password)
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

        @Option(help: "The server's data directory.")
        var data: String

        @Argument(help: "The username.")
        var username: String

        func run() async throws {
            let store = try ServerStore(directory: data)
            print(try await store.issueToken(username: username).accessToken)
        }
    }
}
