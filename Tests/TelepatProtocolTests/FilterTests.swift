import JSONDiff
import TelepatProtocol
import Testing

private func json(_ text: String) throws -> JSONValue { try JSONValue(parsing: text) }

private func filter(_ text: String) throws -> TelepatFilter { try TelepatFilter(parsing: try json(text)) }

/// Subscription `filters` and `sort` (the shapes in TelepatFilter's documentation).
@Suite("Telepat filters and sort")
struct FilterTests {
    let objects: [JSONObject] = [
        ["id": "a", "status": "open", "priority": 3, "title": "Urgent: fix the roof", "tags": ["home", "roof"], "score": 1.5],
        ["id": "b", "status": "done", "priority": 1, "title": "buy milk", "tags": ["shop"], "archived": true],
        ["id": "c", "status": "open", "priority": 2, "title": "call Bob", "archived": .null, "due": "2026-12-01"],
        ["id": "d", "title": "no status", "priority": "high"],
    ]

    private func ids(_ text: String) throws -> [String] {
        let parsed = try filter(text)
        return objects.filter(parsed.matches).compactMap { $0["id"]?.stringValue }
    }

    @Test func eachConditionSelectsWhatItSays() throws {
        #expect(try ids(#"{"and": [{"is": {"status": "open"}}]}"#) == ["a", "c"])
        #expect(try ids(#"{"and": [{"is": {"priority": 1.0}}]}"#) == ["b"], "numbers by value")
        #expect(try ids(#"{"and": [{"is": {"tags": "roof"}}]}"#) == ["a"], "an array holding the value")
        #expect(try ids(#"{"and": [{"not": {"is": {"status": "open"}}}]}"#) == ["b", "d"], "a missing key is not equal")
        #expect(try ids(#"{"and": [{"like": {"title": "URGENT"}}]}"#) == ["a"], "ignoring case")
        #expect(try ids(#"{"and": [{"like": {"priority": "2"}}]}"#) == ["c"], "a number as written")
        #expect(try ids(#"{"and": [{"range": {"priority": {"gte": 2}}}]}"#) == ["a", "c"], "a string is not in a number range")
        #expect(try ids(#"{"and": [{"range": {"priority": {"gt": 1, "lt": 3}}}]}"#) == ["c"])
        #expect(try ids(#"{"and": [{"range": {"due": {"lte": "2026-12-31"}}}]}"#) == ["c"], "strings with strings")
        #expect(try ids(#"{"and": [{"exists": "archived"}]}"#) == ["b"], "null is not there")
        #expect(try ids(#"{"and": [{"exists": {"field": "score"}}]}"#) == ["a"])
        #expect(try ids(#"{"and": [{"not": {"exists": ["status", "archived"]}}]}"#) == ["a", "c", "d"])
        #expect(try ids(#"{"or": [{"in_array": {"status": ["done", "later"]}}, {"in_array": {"tags": ["home"]}}]}"#) == ["a", "b"])
    }

    @Test func connectorsJoinClausesAndTheKeysOfOne() throws {
        #expect(try ids(#"{"and": [{"is": {"status": "open"}}, {"range": {"priority": {"gte": 3}}}]}"#) == ["a"])
        #expect(try ids(#"{"or": [{"is": {"status": "done"}}, {"like": {"title": "bob"}}]}"#) == ["b", "c"])
        // As on Telepat, the keys of one condition are joined by the enclosing connector.
        #expect(try ids(#"{"or": [{"is": {"status": "done", "priority": 3}}]}"#) == ["a", "b"])
        #expect(try ids(#"{"and": [{"is": {"status": "open", "priority": 3}}]}"#) == ["a"])
        #expect(try ids(#"{"and": [{"not": {"is": {"status": "open", "priority": 3}}}]}"#) == ["b", "c", "d"])
        #expect(try ids(#"""
            {"or": [{"and": [{"is": {"status": "open"}}, {"not": {"like": {"title": "roof"}}}]},
                    {"and": [{"exists": "archived"}, {"range": {"priority": {"lt": 2}}}]}]}
            """#) == ["b", "c"])
    }

    @Test(arguments: [
        #"[]"#, #"{}"#, #"{"is": {"a": 1}}"#, #"{"and": [], "or": []}"#, #"{"and": []}"#, #"{"and": {"is": {"a": 1}}}"#,
        #"{"and": [{"is": {}}]}"#, #"{"and": [{"equals": {"a": 1}}]}"#, #"{"and": [{"like": {"a": 1}}]}"#,
        #"{"and": [{"range": {"a": 1}}]}"#, #"{"and": [{"range": {"a": {"between": 1}}}]}"#,
        #"{"and": [{"range": {"a": {"gt": true}}}]}"#, #"{"and": [{"in_array": {"a": 1}}]}"#, #"{"and": [{"exists": 1}]}"#,
        #"{"and": [{"exists": ["a", 2]}]}"#, #"{"and": [{"not": {"is": {"a": 1}, "like": {"b": "x"}}}]}"#, #"{"and": [{"is": {"a": 1}, "like": {"b": "x"}}]}"#,
    ])
    func malformedFiltersAreRefused(text: String) throws {
        #expect(throws: TelepatProtocolError.self) { _ = try filter(text) }
    }

    @Test func sortOrdersByKeysThenKeepsTheOrder() throws {
        func sorted(_ text: String) throws -> [String] {
            try TelepatSort(parsing: try json(text)).sorted(objects).compactMap { $0["id"]?.stringValue }
        }
        // Numbers before strings; objects without the key last either way.
        #expect(try sorted(#"{"priority": "asc"}"#) == ["b", "c", "a", "d"])
        #expect(try sorted(#"{"priority": "desc"}"#) == ["d", "a", "c", "b"])
        #expect(try sorted(#"{"status": "desc"}"#) == ["a", "c", "b", "d"])
        #expect(try sorted(#"[{"status": {"order": "asc"}}, {"priority": "desc"}]"#) == ["b", "a", "c", "d"])
        #expect(try sorted(#"{"missing": "asc"}"#) == ["a", "b", "c", "d"])
        for bad in [#"{"priority": "up"}"#, #"[]"#, #"{}"#, #"[{"a": "asc"}, 3]"#, #""asc""#] {
            #expect(throws: TelepatProtocolError.self, "\(bad)") { _ = try TelepatSort(parsing: try json(bad)) }
        }
    }
}
