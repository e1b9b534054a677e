/// One PDU as it travels in a WebSocket binary message:
/// `headerLen:u32 dataLen:u32 eHeader eData` (both sealed with crypto_box, opened elsewhere).
/// Version 2 carries the data's random nonce in front of eData, counted by dataLen; a PDU with
/// no data has an empty data part in both versions.
public struct ApptimistFrame: Hashable, Sendable {
    public static let lengthFieldsSize = 8
    public static let dataNonceLength = 24

    public var sealedHeader: [UInt8]
    /// Version 2 only: the data part's nonce (nil when there is no data, and always in version 1).
    public var dataNonce: [UInt8]?
    public var sealedData: [UInt8]

    public init(sealedHeader: [UInt8], dataNonce: [UInt8]? = nil, sealedData: [UInt8] = []) {
        self.sealedHeader = sealedHeader
        self.dataNonce = dataNonce
        self.sealedData = sealedData
    }

    /// One whole binary message: its lengths must account for every byte.
    public static func parse(_ bytes: [UInt8], version: ApptimistVersion) throws(ApptimistProtocolError) -> ApptimistFrame {
        var reader = ByteReader(bytes)
        guard bytes.count >= lengthFieldsSize else { throw .truncatedFrame(length: bytes.count) }
        let headerLength = Int(try reader.unsigned(UInt32.self, "headerLen"))
        let dataLength = Int(try reader.unsigned(UInt32.self, "dataLen"))
        guard headerLength <= reader.remaining else {
            throw .lengthExceedsFrame(field: "headerLen", length: headerLength, available: reader.remaining)
        }
        let header = try reader.bytes(headerLength, "eHeader")
        guard dataLength <= reader.remaining else {
            throw .lengthExceedsFrame(field: "dataLen", length: dataLength, available: reader.remaining)
        }
        var data = try reader.bytes(dataLength, "eData")
        try reader.finish()
        guard version == .v2, !data.isEmpty else { return ApptimistFrame(sealedHeader: header, sealedData: data) }
        guard data.count > dataNonceLength else { throw .missingDataNonce(length: data.count) }
        let nonce = Array(data.prefix(dataNonceLength))
        data.removeFirst(dataNonceLength)
        return ApptimistFrame(sealedHeader: header, dataNonce: nonce, sealedData: data)
    }

    public func render(version: ApptimistVersion) throws(ApptimistProtocolError) -> [UInt8] {
        var dataPart = sealedData
        switch version {
        case .v1:
            if let nonce = dataNonce { throw .wrongFieldLength(field: "dataNonce", expected: 0, actual: nonce.count) }
        case .v2:
            let nonce = dataNonce ?? []
            let expected = sealedData.isEmpty ? 0 : Self.dataNonceLength
            guard nonce.count == expected else { throw .wrongFieldLength(field: "dataNonce", expected: expected, actual: nonce.count) }
            dataPart = nonce + sealedData
        }
        var writer = ByteWriter()
        try writer.length(of: sealedHeader, "eHeader", as: UInt32.self)
        try writer.length(of: dataPart, "eData", as: UInt32.self)
        writer.raw(sealedHeader)
        writer.raw(dataPart)
        return writer.bytes
    }
}
