import ApptimistCrypto
import ApptimistProtocol
import ArgumentParser
import Foundation
import SyncServer

/// `bucketfs apptimist`: identities for the Apptimist protocol, and the accounts of a server's
/// Apptimist service (offline, on its data directory, as `bucketfs user` is for Simperium).
struct ApptimistCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "apptimist",
        abstract: "Apptimist identities, and the accounts of a server's Apptimist service.",
        subcommands: [Keygen.self, Invite.self, Users.self, ServiceKey.self]
    )

    /// `bucketfs apptimist keygen FILE`: a new identity file (mode 0600).
    struct Keygen: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Write a new identity (Curve25519 and Ed25519 key pairs) to FILE, mode 0600, and print its public keys.",
            discussion: "The file is the account: keep it. An existing file is never replaced.")

        @Option(help: "A name for people, kept in the file (the account's name at `user add` by default).")
        var name: String?

        @Argument(help: "The identity file to create.")
        var file: String

        func run() async throws {
            let name = self.name ?? URL(fileURLWithPath: file).deletingPathExtension().lastPathComponent
            let identity = try ApptimistIdentity.generate(name: name)
            try identity.write(to: file)
            print("public key \(ApptimistHex.encode(identity.box.publicKey))")
            print("auth key \(ApptimistHex.encode(identity.signing.publicKey))")
        }
    }

    /// `bucketfs apptimist invite`: a single-use token for NEW.
    struct Invite: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print a single-use invitation token: a client's NEW with it creates its account.")

        @OptionGroup var place: ServerDataOptions

        func run() async throws {
            let store = try await place.open()
            defer { store.close() }
            print(try await store.apptimist().invite())
        }
    }

    /// `bucketfs apptimist user add NAME`: an account for an identity's public keys.
    struct Users: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "user", abstract: "Manage the Apptimist service's user accounts.", subcommands: [Add.self])

        struct Add: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "Create an account for an identity: its file (--identity) or its two public keys (--public-key, --auth-key, as keygen prints them).")

            @OptionGroup var place: ServerDataOptions

            @Option(help: "The user's identity file (only its public keys are stored).")
            var identity: String?

            @Option(name: .customLong("public-key"), help: "The user's public encryption key, 64 hex digits.")
            var publicKey: String?

            @Option(name: .customLong("auth-key"), help: "The user's public signing key, 64 hex digits.")
            var authKey: String?

            @Option(help: "The seed's uid (searchable; no Facebook check).")
            var uid: String = ""

            @Argument(help: "The account's name (searchable by name).")
            var name: String

            func validate() throws {
                guard (identity == nil) != (publicKey == nil && authKey == nil) else {
                    throw ValidationError("give --identity FILE, or --public-key and --auth-key")
                }
                if identity == nil, publicKey == nil || authKey == nil { throw ValidationError("--public-key and --auth-key go together") }
                guard name.utf8.count <= 255, uid.utf8.count <= 255 else { throw ValidationError("name and uid are at most 255 bytes") }
            }

            func run() async throws {
                let keys: (box: [UInt8], auth: [UInt8])
                if let identity {
                    let read = try ApptimistIdentity(file: identity)
                    keys = (read.box.publicKey, read.signing.publicKey)
                } else {
                    guard let box = publicKey.flatMap(ApptimistHex.decode), box.count == 32,
                        let auth = authKey.flatMap(ApptimistHex.decode), auth.count == 32
                    else { throw ValidationError("--public-key and --auth-key are 64 hex digits each") }
                    keys = (box, auth)
                }
                let store = try await place.open()
                defer { store.close() }
                try await store.apptimist().addUser(publicKey: keys.box, authKey: keys.auth, name: name, uid: uid)
                FileHandle.standardError.write(Data("created Apptimist user \(name) (public key \(ApptimistHex.encode(keys.box)))\n".utf8))
            }
        }
    }

    /// `bucketfs apptimist service-key`: the document `GET /SERVICE` answers, for pinning.
    struct ServiceKey: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "service-key",
            abstract: "Print the service key document clients fetch from GET /SERVICE (to pin it out of band).")

        @OptionGroup var place: ServerDataOptions

        @Option(help: "The service name (serve --apptimist SERVICE).")
        var service: String

        func run() async throws {
            let store = try await place.open()
            defer { store.close() }
            print(String(decoding: try await store.apptimist().serviceKey(service: service).json(server: Version.text), as: UTF8.self))
        }
    }
}
