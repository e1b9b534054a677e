/// The PDU types of the spec ("Types").
public enum ApptimistPDUType: UInt8, CaseIterable, Hashable, Sendable {
    case login = 1, redirect, new, del, message, truncate, pause, resume, vouch, vouchers
    case searchByName, searchByUID, searchByKey, user, read, lock, write, remove
}

/// The header fields READ, LOCK, WRITE and REMOVE share: `pubEncrKey error filenameLen filename`.
public struct ApptimistFileFields: Hashable, Sendable {
    public var publicKey: [UInt8]
    /// Zero from the device; the service's answer puts a non-zero code here (its description in the data).
    public var error: UInt16
    public var filename: [UInt8]

    public init(publicKey: [UInt8], error: UInt16 = 0, filename: [UInt8]) {
        self.publicKey = publicKey
        self.error = error
        self.filename = filename
    }
}

/// A decrypted header's fields after `version type`, one case per PDU type. Keys are 32 bytes,
/// signatures, message ids and `head` 64; names, uids, tokens, file names and URIs are the
/// spec's `[]u8` (their meaning, and any text encoding, is for the layer above).
public enum ApptimistPDU: Hashable, Sendable {
    case login(userPublicKey: [UInt8], signature: [UInt8], max: UInt16, head: [UInt8])
    case redirect(uri: [UInt8])
    case new(publicKey: [UInt8], authKey: [UInt8], name: [UInt8], uid: [UInt8], token: [UInt8])
    case del(publicKey: [UInt8])
    case message(time: UInt64, recipient: [UInt8], to: [UInt8], from: [UInt8])
    case truncate(messageID: [UInt8])
    case pause
    case resume
    case vouch(subject: [UInt8], signature: [UInt8])
    case vouchers(subject: [UInt8], vouchers: [[UInt8]])
    case searchByName(maxUsers: UInt16, name: [UInt8])
    case searchByUID(maxUsers: UInt16, uid: [UInt8])
    case searchByKey(publicKey: [UInt8])
    case user(count: UInt16, publicKey: [UInt8], name: [UInt8], uid: [UInt8])
    case read(ApptimistFileFields)
    case lock(ApptimistFileFields)
    case write(ApptimistFileFields)
    case remove(ApptimistFileFields)

    public var type: ApptimistPDUType {
        switch self {
        case .login: return .login
        case .redirect: return .redirect
        case .new: return .new
        case .del: return .del
        case .message: return .message
        case .truncate: return .truncate
        case .pause: return .pause
        case .resume: return .resume
        case .vouch: return .vouch
        case .vouchers: return .vouchers
        case .searchByName: return .searchByName
        case .searchByUID: return .searchByUID
        case .searchByKey: return .searchByKey
        case .user: return .user
        case .read: return .read
        case .lock: return .lock
        case .write: return .write
        case .remove: return .remove
        }
    }
}

/// Where a header puts the fields the seed's header lines leave out. The seed lists MESSAGE's
/// `time` and the searches' `maxUsers` among their fields, but its header lines
/// (`messageHeader = version type recipientPubEncrKey toPubEncrKey fromPubEncrKey`,
/// `searchByNameHeader = version type nameLen name`) have no place for them. bucketfs puts each
/// right after `type`, as the field lists order them; a client written from the header lines
/// alone leaves them out. The two differ in length, so a version 1 service reads both and
/// answers a connection in the one it speaks (Docs/apptimist-protocol.md, "Header layouts").
public enum ApptimistHeaderLayout: Hashable, Sendable {
    /// `time` and `maxUsers` right after `type`: bucketfs's, and always version 2's.
    case fieldLists
    /// The seed's header lines as written: no `time` (the service stamps its own when it
    /// receives a message), no `maxUsers` (no limit).
    case headerLines

    /// Whether `pdu`'s header is laid out differently under the two (MESSAGE and the two
    /// searches with a limit).
    public static func differs(for type: ApptimistPDUType) -> Bool {
        switch type {
        case .message, .searchByName, .searchByUID: return true
        default: return false
        }
    }
}

/// A decrypted header: `version type` and the type's fields, every field in the spec's order.
public struct ApptimistHeader: Hashable, Sendable {
    static let keyLength = 32
    static let signatureLength = 64

    public var version: ApptimistVersion
    public var pdu: ApptimistPDU
    /// How it is laid out (`ApptimistHeaderLayout`); version 2 has only `fieldLists`.
    public var layout: ApptimistHeaderLayout

    public init(version: ApptimistVersion, pdu: ApptimistPDU, layout: ApptimistHeaderLayout = .fieldLists) {
        self.version = version
        self.pdu = pdu
        self.layout = version == .v1 ? layout : .fieldLists
    }

    /// A header received on a connection that negotiated `version`. On version 1 a MESSAGE or
    /// search is read in either layout: the field lists' first (preferred where both would fit,
    /// which only a search's name bytes can make happen), then the header lines'.
    public static func parse(_ bytes: [UInt8], version: ApptimistVersion) throws(ApptimistProtocolError) -> ApptimistHeader {
        var reader = ByteReader(bytes)
        let versionByte = try reader.unsigned(UInt8.self, "version")
        guard let found = ApptimistVersion(rawValue: versionByte) else { throw .unsupportedVersion(versionByte) }
        guard found == version else { throw .versionMismatch(expected: version.rawValue, found: versionByte) }
        let typeByte = try reader.unsigned(UInt8.self, "type")
        guard let type = ApptimistPDUType(rawValue: typeByte) else { throw .unknownType(typeByte) }
        let fields = reader
        do throws(ApptimistProtocolError) {
            let pdu = try parseFields(type, &reader, layout: .fieldLists)
            try reader.finish()
            return ApptimistHeader(version: version, pdu: pdu)
        } catch {
            guard version == .v1, ApptimistHeaderLayout.differs(for: type) else { throw error }
            var literal = fields
            guard let pdu = try? parseFields(type, &literal, layout: .headerLines), (try? literal.finish()) != nil else { throw error }
            return ApptimistHeader(version: version, pdu: pdu, layout: .headerLines)
        }
    }

    private static func parseFields(
        _ type: ApptimistPDUType, _ r: inout ByteReader, layout: ApptimistHeaderLayout
    ) throws(ApptimistProtocolError) -> ApptimistPDU {
        let literal = layout == .headerLines
        func key(_ field: String) throws(ApptimistProtocolError) -> [UInt8] { try r.bytes(keyLength, field) }
        func signature(_ field: String) throws(ApptimistProtocolError) -> [UInt8] { try r.bytes(signatureLength, field) }
        func u8Length(_ field: String) throws(ApptimistProtocolError) -> Int { Int(try r.unsigned(UInt8.self, field)) }
        func fileFields() throws(ApptimistProtocolError) -> ApptimistFileFields {
            let publicKey = try key("pubEncrKey")
            let error = try r.unsigned(UInt16.self, "error")
            let filename = try r.bytes(u8Length("filenameLen"), "filename")
            return ApptimistFileFields(publicKey: publicKey, error: error, filename: filename)
        }
        switch type {
        case .login:
            return .login(
                userPublicKey: try key("userPubEncrKey"), signature: try signature("signature"),
                max: try r.unsigned(UInt16.self, "max"), head: try r.bytes(64, "head"))
        case .redirect:
            return .redirect(uri: try r.bytes(Int(try r.unsigned(UInt16.self, "uriLen")), "uri"))
        case .new:
            let publicKey = try key("pubEncrKey")
            let authKey = try key("pubAuthKey")
            let nameLength = try u8Length("nameLen")
            let uidLength = try u8Length("uidLen")
            let tokenLength = try u8Length("tokenLen")
            return .new(
                publicKey: publicKey, authKey: authKey, name: try r.bytes(nameLength, "name"),
                uid: try r.bytes(uidLength, "uid"), token: try r.bytes(tokenLength, "token"))
        case .del:
            return .del(publicKey: try key("pubEncrKey"))
        case .message:
            return .message(
                time: literal ? 0 : try r.unsigned(UInt64.self, "time"), recipient: try key("recipientPubEncrKey"),
                to: try key("toPubEncrKey"), from: try key("fromPubEncrKey"))
        case .truncate:
            return .truncate(messageID: try r.bytes(64, "messageID"))
        case .pause:
            return .pause
        case .resume:
            return .resume
        case .vouch:
            return .vouch(subject: try key("subjectPubEncrKey"), signature: try signature("signature"))
        case .vouchers:
            let subject = try key("subjectPubEncrKey")
            let count = Int(try r.unsigned(UInt32.self, "count"))
            // Checked before reading: a forged count must not make us allocate for it.
            guard count <= r.remaining / keyLength else {
                throw .lengthExceedsFrame(field: "count", length: count * keyLength, available: r.remaining)
            }
            var vouchers: [[UInt8]] = []
            for _ in 0 ..< count { vouchers.append(try key("voucherPubEncrKeys")) }
            return .vouchers(subject: subject, vouchers: vouchers)
        case .searchByName:
            let maxUsers = literal ? 0 : try r.unsigned(UInt16.self, "maxUsers")
            return .searchByName(maxUsers: maxUsers, name: try r.bytes(u8Length("nameLen"), "name"))
        case .searchByUID:
            let maxUsers = literal ? 0 : try r.unsigned(UInt16.self, "maxUsers")
            return .searchByUID(maxUsers: maxUsers, uid: try r.bytes(u8Length("uidLen"), "uid"))
        case .searchByKey:
            return .searchByKey(publicKey: try key("pubEncrKey"))
        case .user:
            let count = try r.unsigned(UInt16.self, "count")
            let publicKey = try key("pubEncrKey")
            let nameLength = try u8Length("nameLen")
            let uidLength = try u8Length("uidLen")
            return .user(count: count, publicKey: publicKey, name: try r.bytes(nameLength, "name"), uid: try r.bytes(uidLength, "uid"))
        case .read: return .read(try fileFields())
        case .lock: return .lock(try fileFields())
        case .write: return .write(try fileFields())
        case .remove: return .remove(try fileFields())
        }
    }

    /// The header's bytes (to be sealed), or why a field does not fit its size or length prefix.
    public func render() throws(ApptimistProtocolError) -> [UInt8] {
        let literal = layout == .headerLines
        var w = ByteWriter()
        w.unsigned(version.rawValue)
        w.unsigned(pdu.type.rawValue)
        func key(_ value: [UInt8], _ field: String) throws(ApptimistProtocolError) { try w.fixed(value, field, length: Self.keyLength) }
        func sixtyFour(_ value: [UInt8], _ field: String) throws(ApptimistProtocolError) { try w.fixed(value, field, length: 64) }
        func fileFields(_ fields: ApptimistFileFields) throws(ApptimistProtocolError) {
            try key(fields.publicKey, "pubEncrKey")
            w.unsigned(fields.error)
            try w.length(of: fields.filename, "filename", as: UInt8.self)
            w.raw(fields.filename)
        }
        switch pdu {
        case .login(let userPublicKey, let signature, let max, let head):
            try key(userPublicKey, "userPubEncrKey")
            try sixtyFour(signature, "signature")
            w.unsigned(max)
            try sixtyFour(head, "head")
        case .redirect(let uri):
            try w.length(of: uri, "uri", as: UInt16.self)
            w.raw(uri)
        case .new(let publicKey, let authKey, let name, let uid, let token):
            try key(publicKey, "pubEncrKey")
            try key(authKey, "pubAuthKey")
            try w.length(of: name, "name", as: UInt8.self)
            try w.length(of: uid, "uid", as: UInt8.self)
            try w.length(of: token, "token", as: UInt8.self)
            w.raw(name + uid + token)
        case .del(let publicKey):
            try key(publicKey, "pubEncrKey")
        case .message(let time, let recipient, let to, let from):
            if !literal { w.unsigned(time) }
            try key(recipient, "recipientPubEncrKey")
            try key(to, "toPubEncrKey")
            try key(from, "fromPubEncrKey")
        case .truncate(let messageID):
            try sixtyFour(messageID, "messageID")
        case .pause, .resume:
            break
        case .vouch(let subject, let signature):
            try key(subject, "subjectPubEncrKey")
            try sixtyFour(signature, "signature")
        case .vouchers(let subject, let vouchers):
            try key(subject, "subjectPubEncrKey")
            guard let count = UInt32(exactly: vouchers.count) else {
                throw .fieldTooLong(field: "voucherPubEncrKeys", length: vouchers.count, maximum: Int(UInt32.max))
            }
            w.unsigned(count)
            for voucher in vouchers { try key(voucher, "voucherPubEncrKeys") }
        case .searchByName(let maxUsers, let name):
            if !literal { w.unsigned(maxUsers) }
            try w.length(of: name, "name", as: UInt8.self)
            w.raw(name)
        case .searchByUID(let maxUsers, let uid):
            if !literal { w.unsigned(maxUsers) }
            try w.length(of: uid, "uid", as: UInt8.self)
            w.raw(uid)
        case .searchByKey(let publicKey):
            try key(publicKey, "pubEncrKey")
        case .user(let count, let publicKey, let name, let uid):
            w.unsigned(count)
            try key(publicKey, "pubEncrKey")
            try w.length(of: name, "name", as: UInt8.self)
            try w.length(of: uid, "uid", as: UInt8.self)
            w.raw(name + uid)
        case .read(let fields), .lock(let fields), .write(let fields), .remove(let fields):
            try fileFields(fields)
        }
        return w.bytes
    }
}
