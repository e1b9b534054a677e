import Foundation
import JSONDiff
import PostgresTestSupport
import Testing
@testable import SyncClient

/// The randomized model on two server nodes sharing one PostgreSQL database: clients spread
/// over both (and moving between them when they come back online) converge with each other and
/// with what the database holds, and the database's change log gives every entity strictly
/// increasing versions (none twice) in cv order.
@Suite("randomized: 4 clients on two PostgreSQL nodes", .serialized, .timeLimit(.minutes(4)))
struct TwoNodeModelTests {
    @Test(arguments: RandomizedModel.seeds(count: 2)) func clientsOnTwoNodesConvergeWithTheDatabase(seed: UInt64) async throws {
        try await run(seed: seed, allowDeletes: true)
    }

    @Test(arguments: RandomizedModel.seeds(count: 1)) func noAddedFieldIsLostAcrossNodes(seed: UInt64) async throws {
        try await run(seed: seed, allowDeletes: false)
    }

    func run(seed: UInt64, allowDeletes: Bool) async throws {
        let cluster = try await PostgresCluster.running()
        let database = try await cluster.createDatabase()
        let nodes = [try TestServer(databaseURL: cluster.url(database: database)), try TestServer(databaseURL: cluster.url(database: database))]
        let directory = try TemporaryDirectory()
        do {
            for node in nodes { try await node.start() }
            let model = RandomizedModel(
                seed: seed, allowDeletes: allowDeletes, steps: 120, timeLimit: .seconds(60), servers: nodes,
                clientNames: ["a", "b", "c", "d"], moveOnReconnect: true
            )
            try await model.run(token: try await nodes[0].makeToken(), directory: directory) { clients, converged in
                let stored = try await DatabaseBucket.read(cluster: cluster, database: database)
                #expect(converged == stored.entities, "seed \(seed): the clients' entities differ from the database's")
                // What the log of each key the clients disagree on says (the databases go with
                // the test): the story of a failure that does not replay.
                let views = try clients.map { try snapshot($0.store) }
                let disputed = Set(views.flatMap(\.keys)).union(stored.entities.keys).filter { key in
                    views.contains { $0[key] != stored.entities[key] }
                }
                for key in disputed.sorted() {
                    print("seed \(seed): \(key) in the database: \(stored.entities[key].map { JSONValue.object($0).compactRendered() } ?? "removed") at v\(stored.versions[key] ?? -1)")
                    for change in stored.changes where change.key == key {
                        print("  cv \(change.cv) v\(change.version) by \(change.clientID) ccid \(change.ccid)")
                    }
                    for client in clients {
                        let entity = try client.store.entity(bucket: "notes", key: key)
                        print("  \(client.name): v\(entity?.version ?? -1) \(entity?.state.description ?? "no row") \(entity?.reason ?? "")")
                    }
                }
                for problem in stored.orderingProblems() { Issue.record("seed \(seed): \(problem)") }
                // Every client acknowledged up to the bucket's newest change.
                for client in clients {
                    let cv = try client.store.bucket(named: "notes")?.cv
                    // The counter: a cv's first 12 hex digits (then the tag of the change it names).
                    #expect(cv.flatMap { Int64($0.prefix(12), radix: 16) } == stored.changes.last?.cv,
                        "seed \(seed): \(client.name) is at cv \(cv ?? "none")")
                }
            }
        } catch {
            Issue.record(error, "seed \(seed)")
        }
        for node in nodes { await node.cleanup() }
        directory.remove()
        await cluster.dropDatabase(database)
    }
}

/// The "notes" bucket as the database holds it.
struct DatabaseBucket {
    struct Change: Decodable {
        var cv: Int64
        var key: String
        var version: Int
        var clientID: String
        var ccid: String
    }

    var entities: [String: JSONObject]
    var versions: [String: Int]
    /// The change log in cv order.
    var changes: [Change]

    static func read(cluster: PostgresCluster, database: String) async throws -> DatabaseBucket {
        let bucket = "(SELECT id FROM buckets WHERE name = 'notes')"
        let entityRows = try await cluster.administer("""
            SELECT COALESCE(json_agg(json_build_array(key, version, data)), '[]')::text FROM entities WHERE bucket_id = \(bucket)
            """, database: database)
        let changeRows = try await cluster.administer("""
            SELECT COALESCE(json_agg(json_build_object('cv', cv, 'key', key, 'version', end_version, 'clientID', client_id, 'ccid', ccid)
                ORDER BY cv), '[]')::text FROM changes WHERE bucket_id = \(bucket)
            """, database: database)
        var entities: [String: JSONObject] = [:]
        var versions: [String: Int] = [:]
        let rows = try JSONSerialization.jsonObject(with: Data((entityRows.first ?? "[]").utf8)) as? [[Any]] ?? []
        for row in rows {
            guard let key = row[0] as? String, let version = row[1] as? Int else { throw TestFailure("bad entity row \(row)") }
            versions[key] = version
            guard let text = row[2] as? String else { continue } // deleted
            guard case .object(let object) = try JSONValue(parsing: text) else { throw TestFailure("entity \(key) is not an object") }
            entities[key] = object
        }
        let changes = try JSONDecoder().decode([Change].self, from: Data((changeRows.first ?? "[]").utf8))
        return DatabaseBucket(entities: entities, versions: versions, changes: changes)
    }

    /// What breaks the ordering promises: in cv order, each entity's versions go up by one
    /// from change to change (none given twice, none skipped) and end at its stored version;
    /// cvs strictly increase; no clientid+ccid is applied twice.
    func orderingProblems() -> [String] {
        var problems: [String] = []
        var last: [String: Int] = [:]
        var previousCV: Int64 = 0
        var ccids = Set<String>()
        for change in changes {
            if change.cv <= previousCV { problems.append("cv \(change.cv) follows cv \(previousCV)") }
            previousCV = change.cv
            if let before = last[change.key], change.version != before + 1 {
                problems.append("\(change.key): version \(change.version) at cv \(change.cv) follows version \(before)")
            }
            last[change.key] = change.version
            if !ccids.insert(change.clientID + " " + change.ccid).inserted {
                problems.append("\(change.clientID) ccid \(change.ccid) applied twice")
            }
        }
        for (key, version) in versions where last[key] != version {
            problems.append("\(key): stored version \(version), newest change gives \(last[key].map(String.init) ?? "none")")
        }
        return problems
    }
}
