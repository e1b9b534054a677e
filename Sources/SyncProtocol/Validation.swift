import JSONDiff

/// Entity keys: `[A-Za-z0-9._%@-]{1,256}` (DESIGN "Protocol facts").
public enum EntityKey {
    /// The longest key, in bytes.
    public static let maxLength = 256

    /// Whether `key` is a valid entity key.
    public static func isValid(_ key: some StringProtocol) -> Bool {
        let utf8 = key.utf8
        guard !utf8.isEmpty, utf8.count <= maxLength else { return false }
        return utf8.allSatisfy { isAlphanumeric($0) || "._%@-".utf8.contains($0) }
    }

    /// Throws `invalidKey` unless `key` is valid.
    public static func validate(_ key: some StringProtocol) throws(ProtocolError) {
        if !isValid(key) { throw .invalidKey(excerpt(key)) }
    }

    /// The weaker check applied to keys the server sends: a client must not drop a whole batch
    /// over a key another server allowed, but a key must still fit in `e:key.v` and a file name.
    static func isAcceptableFromServer(_ key: some StringProtocol) -> Bool {
        let utf8 = key.utf8
        guard !utf8.isEmpty, utf8.count <= maxLength * 4 else { return false }
        return utf8.allSatisfy { $0 >= 0x20 && $0 != 0x7F }
    }
}

/// Bucket names: `[A-Za-z0-9._%-]{1,64}` (DESIGN "Protocol facts").
public enum BucketName {
    /// The longest bucket name, in bytes.
    public static let maxLength = 64

    /// Whether `name` is a valid bucket name.
    public static func isValid(_ name: some StringProtocol) -> Bool {
        let utf8 = name.utf8
        guard !utf8.isEmpty, utf8.count <= maxLength else { return false }
        return utf8.allSatisfy { isAlphanumeric($0) || "._%-".utf8.contains($0) }
    }

    /// Throws `invalidBucketName` unless `name` is valid.
    public static func validate(_ name: some StringProtocol) throws(ProtocolError) {
        if !isValid(name) { throw .invalidBucketName(excerpt(name)) }
    }
}

/// Change ids (ccid). Reference clients send 32 hex digits or UUIDs; accept any short printable
/// ASCII token so an odd client is not rejected, but nothing that could break a frame or a log.
public enum ChangeID {
    /// The longest ccid, in bytes.
    public static let maxLength = 64

    /// Whether `ccid` is acceptable.
    public static func isValid(_ ccid: some StringProtocol) -> Bool {
        let utf8 = ccid.utf8
        guard !utf8.isEmpty, utf8.count <= maxLength else { return false }
        return utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F }
    }

    /// Throws `invalidChangeID` unless `ccid` is acceptable.
    public static func validate(_ ccid: some StringProtocol) throws(ProtocolError) {
        if !isValid(ccid) { throw .invalidChangeID(excerpt(ccid)) }
    }
}

/// Access tokens: Simperium's format is 32 or more ASCII alphanumerics (spec "init", error 400).
public enum AccessToken {
    /// The shortest well-formed token.
    public static let minLength = 32
    /// A bound so a hostile client cannot make the server hash megabytes.
    public static let maxLength = 512

    /// Whether `token` has the token format (says nothing about whether it is valid).
    public static func isWellFormed(_ token: some StringProtocol) -> Bool {
        let utf8 = token.utf8
        guard utf8.count >= minLength, utf8.count <= maxLength else { return false }
        return utf8.allSatisfy(isAlphanumeric)
    }

    /// Throws `malformedToken` (auth code 400) unless `token` is well formed.
    public static func validate(_ token: some StringProtocol) throws(ProtocolError) {
        if !isWellFormed(token) { throw .malformedToken }
    }
}

/// Usernames as sent in `auth:<username>`.
public enum Username {
    /// The longest username, in bytes.
    public static let maxLength = 256

    /// Whether `name` can be sent in `auth:`: clients treat any `auth:` text that parses as
    /// JSON as a failure (DESIGN "Protocol facts"), so such a name would lock its owner out.
    public static func isValid(_ name: some StringProtocol) -> Bool {
        let utf8 = name.utf8
        guard !utf8.isEmpty, utf8.count <= maxLength else { return false }
        guard utf8.allSatisfy({ $0 >= 0x20 && $0 != 0x7F }) else { return false }
        return (try? JSONValue(parsing: String(name))) == nil
    }

    /// Throws `invalidUsername` unless `name` is valid.
    public static func validate(_ name: some StringProtocol) throws(ProtocolError) {
        if !isValid(name) { throw .invalidUsername(excerpt(name)) }
    }
}

/// Change versions (`cv`, `current`): opaque tokens, 24 hex digits in practice.
public enum ChangeVersion {
    /// The longest change version, in bytes.
    public static let maxLength = 256

    /// Whether `cv` is a plausible change version: printable ASCII without spaces.
    public static func isValid(_ cv: some StringProtocol) -> Bool {
        let utf8 = cv.utf8
        guard !utf8.isEmpty, utf8.count <= maxLength else { return false }
        return utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F }
    }
}

@inline(__always)
func isAlphanumeric(_ byte: UInt8) -> Bool {
    (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z"))
        || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z"))
        || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9"))
}

@inline(__always)
func isDigit(_ byte: UInt8) -> Bool {
    byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")
}

/// A non-negative decimal of at most 18 digits (fits Int64), digits only: no sign, no spaces.
func parseDecimal(_ text: some StringProtocol) -> Int? {
    let utf8 = text.utf8
    guard !utf8.isEmpty, utf8.count <= 18, utf8.allSatisfy(isDigit) else { return nil }
    var value = 0
    for byte in utf8 { value = value * 10 + Int(byte - UInt8(ascii: "0")) }
    return value
}
