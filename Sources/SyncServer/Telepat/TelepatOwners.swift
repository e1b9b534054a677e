import Foundation
import NIOConcurrencyHelpers

/// The accounts holding each Telepat application's objects (`TelepatSettings.Application.owner`),
/// found once and remembered. A default owner that does not exist yet is created with a random
/// password, so no one can take its name first by registering it.
final class TelepatOwners: Sendable {
    /// An owner the settings name that has no account.
    struct Missing: Error, CustomStringConvertible {
        var application: String
        var owner: String

        var description: String {
            "the owner \(owner.debugDescription) of Telepat application \(application) has no account: create it with bucketfs user add"
        }
    }

    private let store: any ServerStorage
    private let known = NIOLockedValueBox<[String: Int64]>([:])

    init(store: any ServerStorage) {
        self.store = store
    }

    /// The owner's user id (its buckets hold the application's objects).
    func userID(of application: TelepatSettings.Application) async throws -> Int64 {
        if let id = known.withLockedValue({ $0[application.id] }) { return id }
        let id = try await Self.ensure(application, store: store)
        known.withLockedValue { $0[application.id] = id }
        return id
    }

    /// Finds the owner, creating a default one that is missing (another node or request may
    /// create it at the same moment: then its account is the one found).
    static func ensure(_ application: TelepatSettings.Application, store: any ServerStorage) async throws -> Int64 {
        if let user = try await store.user(named: application.owner) { return user.id }
        guard !application.ownerDeclared else { throw Missing(application: application.id, owner: application.owner) }
        do {
            _ = try await store.createUser(username: application.owner, password: TokenGenerator.generate())
        } catch SyncServerError.userExists {}
        guard let user = try await store.user(named: application.owner) else {
            throw Missing(application: application.id, owner: application.owner)
        }
        return user.id
    }
}

extension ServerBackend {
    /// Makes sure every application's owner has an account before the server answers anyone
    /// (`bucketfs serve --telepat` calls it first): a missing default owner is created, a
    /// missing declared one is an error.
    public func prepareTelepat(_ settings: TelepatSettings) async throws {
        for application in settings.applications.values.sorted(by: { $0.id < $1.id }) {
            _ = try await TelepatOwners.ensure(application, store: storage)
        }
    }
}
