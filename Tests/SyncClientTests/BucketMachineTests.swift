import JSONDiff
import SyncProtocol
import SyncEngine
import SyncStore
import Testing
@testable import SyncClient

@Suite("BucketMachine: the channel's protocol life without sockets", .timeLimit(.minutes(1)))
struct BucketMachineTests {
    let request = InitRequest(clientID: "c", token: String(repeating: "a", count: 32), appID: "app", name: "notes")

    func frames(_ actions: [BucketMachine.Action]) -> [String] {
        actions.compactMap { action in
            if case .send(let message) = action { return message.frameText(channel: 0) }
            return nil
        }
    }

    @Test func firstSyncPagesTheIndexWithDataThenSendsOwedChanges() {
        var machine = BucketMachine(channel: 0, bucket: "notes", pageLimit: 100)
        #expect(frames(machine.connected(initRequest: request)).first?.hasPrefix("0:init:{") == true)
        #expect(machine.phase == .authorizing)
        let afterAuth = machine.authorized(cv: nil, commandSent: false)
        #expect(afterAuth.first == .beginIndex)
        #expect(frames(afterAuth) == ["0:i:1:::100"])
        let page1 = IndexPage(current: "cv1", index: [.init(id: "a", version: 1, data: ["x": 1]), .init(id: "b", version: 2)], mark: "m1")
        let next = machine.indexPage(page1)
        // The next page is asked for before this one is stored (the server works meanwhile).
        #expect(next.last == .applyIndexPage(page1, isLast: false))
        #expect(frames(next) == ["0:i:1:m1::100"])
        #expect(machine.entitiesKnown == 2)
        #expect(machine.entitiesDone == 1)
        // The entity without data is fetched with `e`, once.
        let fetches = machine.fetch([ReloadRequest(key: "b", version: 2), ReloadRequest(key: "b", version: 2)])
        #expect(frames(fetches) == ["0:e:b.2"])
        machine.entityReceived(key: "b", version: 2)
        #expect(machine.entitiesDone == 2)
        let page2 = IndexPage(current: "cv1", index: [.init(id: "c", version: 1, data: [:])], mark: nil)
        let last = machine.indexPage(page2)
        #expect(last == [.applyIndexPage(page2, isLast: true), .sendOwed])
        #expect(machine.isReady)
    }

    @Test func reconnectWithStoredCVCatchesUpThenSendsOwed() {
        var machine = BucketMachine(channel: 0, bucket: "notes", pageLimit: 100)
        _ = machine.connected(initRequest: request)
        #expect(frames(machine.authorized(cv: "abc", commandSent: false)) == ["0:cv:abc"])
        #expect(machine.phase == .catchingUp)
        let changes: [Change] = []
        #expect(machine.changes(changes) == [.applyChanges([]), .finishCatchUp])
        #expect(machine.isReady)
    }

    @Test func unknownCVReindexesKeepingLocalChanges() {
        var machine = BucketMachine(channel: 0, bucket: "notes", pageLimit: 50)
        _ = machine.connected(initRequest: request)
        _ = machine.authorized(cv: "old", commandSent: false)
        let actions = machine.changeVersionUnknown()
        #expect(actions.first == .beginIndex)
        #expect(frames(actions) == ["0:i:1:::50"])
        #expect(machine.phase == .indexing)
    }

    @Test func commandInInitIsNotSentTwice() {
        var machine = BucketMachine(channel: 0, bucket: "notes", pageLimit: 100)
        _ = machine.connected(initRequest: request)
        #expect(machine.authorized(cv: "abc", commandSent: true).isEmpty)
        #expect(machine.firstCommand(cv: "abc").frameText(channel: 0) == "0:cv:abc")
        #expect(machine.firstCommand(cv: nil).frameText(channel: 3) == "3:i:1:::100")
    }

    @Test func authFailureIsReportedAndSticksAcrossReconnects() {
        var machine = BucketMachine(channel: 0, bucket: "notes", pageLimit: 100)
        _ = machine.connected(initRequest: request)
        let actions = machine.authorizationFailed(code: 401, message: "Token invalid")
        #expect(actions == [.reportAuthFailure(.invalidToken(message: "Token invalid"))])
        machine.disconnected()
        #expect(machine.isUnauthorized)
        machine.clearAuthorizationFailure()
        #expect(machine.phase == .offline)
        var other = BucketMachine(channel: 0, bucket: "notes", pageLimit: 100)
        #expect(other.authorizationFailed(code: 500, message: "x") == [.reportAuthFailure(.other(code: 500, message: "x"))])
        #expect(other.authorizationFailed(code: 400, message: "y") == [.reportAuthFailure(.malformedToken(message: "y"))])
    }

    @Test func catchUpRequestedDuringCatchUpRunsOnceMore() {
        var machine = BucketMachine(channel: 0, bucket: "notes", pageLimit: 100)
        _ = machine.connected(initRequest: request)
        _ = machine.authorized(cv: "abc", commandSent: false)
        _ = machine.changes([])
        #expect(machine.catchUp() == [.sendCatchUp])
        #expect(machine.catchUp().isEmpty)
        #expect(machine.changes([]) == [.applyChanges([]), .sendCatchUp])
        #expect(machine.changes([]) == [.applyChanges([]), .finishCatchUp])
    }

    @Test func nothingIsFetchedOrAppliedWhileOfflineOrAuthorizing() {
        var machine = BucketMachine(channel: 0, bucket: "notes", pageLimit: 100)
        #expect(machine.fetch([ReloadRequest(key: "a", version: 1)]).isEmpty)
        #expect(machine.changes([]).isEmpty)
        _ = machine.connected(initRequest: request)
        #expect(machine.changes([]).isEmpty)
        #expect(machine.indexPage(IndexPage(current: "c", index: [])).isEmpty)
    }

    @Test func disconnectForgetsRequestsSoTheyAreAskedAgain() {
        var machine = BucketMachine(channel: 0, bucket: "notes", pageLimit: 100)
        _ = machine.connected(initRequest: request)
        _ = machine.authorized(cv: "abc", commandSent: false)
        #expect(frames(machine.fetch([ReloadRequest(key: "a", version: 3)])) == ["0:e:a.3"])
        machine.disconnected()
        _ = machine.connected(initRequest: request)
        _ = machine.authorized(cv: "abc", commandSent: false)
        #expect(frames(machine.fetch([ReloadRequest(key: "a", version: 3)])) == ["0:e:a.3"])
    }
}

@Suite("Heartbeat and Backoff", .timeLimit(.minutes(1)))
struct HeartbeatBackoffTests {
    @Test func heartbeatAfterIdleThenDeadWithoutAnswer() {
        let start = ContinuousClock.now
        var heartbeat = Heartbeat(interval: .seconds(20), timeout: .seconds(10), now: start)
        #expect(heartbeat.tick(now: start + .seconds(19)) == .none)
        #expect(heartbeat.tick(now: start + .seconds(20)) == .send(0))
        #expect(heartbeat.tick(now: start + .seconds(25)) == .none)
        heartbeat.receivedHeartbeat(1, at: start + .seconds(26))
        #expect(heartbeat.tick(now: start + .seconds(40)) == .none)
        #expect(heartbeat.tick(now: start + .seconds(46)) == .send(2))
        #expect(heartbeat.tick(now: start + .seconds(56)) == .connectionDead)
    }

    @Test func anyMessageCountsAsAlive() {
        let start = ContinuousClock.now
        var heartbeat = Heartbeat(interval: .seconds(1), timeout: .seconds(1), now: start)
        #expect(heartbeat.tick(now: start + .seconds(1)) == .send(0))
        heartbeat.received(at: start + .milliseconds(1500))
        #expect(heartbeat.tick(now: start + .milliseconds(1900)) == .none)
    }

    @Test func backoffGrowsWithJitterAndCaps() {
        var backoff = Backoff(initial: .seconds(1), maximum: .seconds(8))
        var generator = SystemRandomNumberGenerator()
        let delays = (0..<6).map { _ in backoff.nextDelay(using: &generator) }
        #expect(delays[0] >= .milliseconds(500) && delays[0] <= .seconds(1))
        #expect(delays[1] >= .seconds(1) && delays[1] <= .seconds(2))
        #expect(delays[5] >= .seconds(4) && delays[5] <= .seconds(8))
        backoff.reset()
        #expect(backoff.nextDelay(using: &generator) <= .seconds(1))
    }
}
