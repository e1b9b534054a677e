/// The `i` request: `i:<data>:<mark>:<offset>:<limit>`.
///
/// The mark is in the second slot, as the spec's own example `i::MARK::100` and the reference
/// clients (`i:1:%s::10`) have it, although the spec's prose lists offset second.
public struct IndexRequest: Hashable, Sendable {
    /// Whether each index entry should include the entity data (`d`).
    public var includeData: Bool
    /// The cursor from the previous page's `mark`; must not contain `:`.
    public var mark: String?
    /// An offset pointer; opaque, unused by reference servers; must not contain `:`.
    public var offset: String?
    /// The page size.
    public var limit: Int?

    /// A request from its fields.
    public init(includeData: Bool = false, mark: String? = nil, offset: String? = nil, limit: Int? = nil) {
        self.includeData = includeData
        self.mark = mark
        self.offset = offset
        self.limit = limit
    }

    /// Parses the four colon-separated fields; empty fields are absent.
    public init(payload: String) throws(ProtocolError) {
        let fields = payload.split(separator: ":", omittingEmptySubsequences: false)
        guard fields.count == 4 else {
            throw .wrongFieldCount(.index, expected: 4, actual: fields.count)
        }
        switch fields[0] {
        case "": includeData = false
        case "1": includeData = true
        // Not sent by reference clients, but "0" can only mean "no data".
        case "0": includeData = false
        default: throw .invalidValue(field: "data", value: excerpt(fields[0]))
        }
        mark = fields[1].isEmpty ? nil : String(fields[1])
        offset = fields[2].isEmpty ? nil : String(fields[2])
        if fields[3].isEmpty {
            limit = nil
        } else if let value = parseDecimal(fields[3]) {
            limit = value
        } else {
            throw .invalidValue(field: "limit", value: excerpt(fields[3]))
        }
    }

    /// The payload after `i:`.
    public func renderPayload() -> String {
        let data = includeData ? "1" : ""
        let limitText = limit.map { String($0) } ?? ""
        return "\(data):\(mark ?? ""):\(offset ?? ""):\(limitText)"
    }
}
