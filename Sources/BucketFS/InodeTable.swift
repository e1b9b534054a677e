import Glibc
import JSONDiff

/// What an inode stands for.
enum NodeKind: Hashable, Sendable {
    case root
    case bucket(name: String)
    /// A directory of buckets named `<name>/...` (`BucketGroups`); its inode lives in memory.
    case group(name: String)
    case file(bucket: String, item: MountItemName)
    /// Kept in memory only: emacs lock links (`.#name`) describe a live editing session.
    /// (Boxed, as `history` is: the kind of a million files is not sized for these rare ones.)
    indirect case symlink(bucket: String, name: String, target: String)
    /// The read-only `.history` view (`MountOptions.history`); its inodes live in memory.
    indirect case history(HistoryPath)
}

/// One inode the file system knows: identity, place in the tree, attributes and kernel references.
///
/// A loaded bucket holds one per file, for as long as it stays in memory, packed
/// (`PackedNode`, issue 40: 80 bytes, was 168): the fields are laid out to leave no padding,
/// the optional ones are kept without their own flag byte, and an entity's key is its file name's.
struct Node: Hashable, Sendable {
    let ino: UInt64
    var parent: UInt64
    var size: Int
    var mtime: MountTime
    var ctime: MountTime
    /// How many times the kernel was handed this inode (entry replies) minus what it forgot.
    var lookups: UInt64 = 0
    private var storedAtime: MountTime
    private var storedAliasOf: UInt64
    private var storedFileName: String
    private var storedKind: StoredKind
    private var storedPermissions: UInt16
    /// False once the name is gone; the record lives on until the kernel forgets it.
    var linked = true
    /// Unlinked by a removal from elsewhere, not by this mount: bytes written to it afterwards
    /// make it again (`relinkRemovedElsewhere`), as an edit made before the removal came does.
    var removedElsewhere = false

    private static let noAtime = MountTime.min
    private static let noPermissions = UInt16.max

    init(
        ino: UInt64, parent: UInt64, fileName: String, kind: NodeKind, size: Int, mtime: MountTime, ctime: MountTime,
        atime: MountTime? = nil, permissions: mode_t? = nil, lookups: UInt64 = 0
    ) {
        self.ino = ino
        self.parent = parent
        self.size = size
        self.mtime = mtime
        self.ctime = ctime
        self.lookups = lookups
        self.storedAtime = atime ?? Self.noAtime
        self.storedAliasOf = 0
        self.storedFileName = fileName
        self.storedKind = StoredKind(kind, fileName: fileName)
        self.storedPermissions = permissions.map { UInt16($0 & 0o7777) } ?? Self.noPermissions
    }

    /// The name in its directory (`FileNameCodec`'s for an entity).
    var fileName: String {
        get { storedFileName }
        set {
            // A kind kept as part of the name is made again under the new one.
            let kind = self.kind
            storedFileName = newValue
            storedKind = StoredKind(kind, fileName: newValue)
        }
    }

    var kind: NodeKind {
        get { storedKind.kind(fileName: storedFileName) }
        set { storedKind = StoredKind(newValue, fileName: storedFileName) }
    }

    /// How a node keeps its kind. A loaded bucket holds a million of these: a file whose name
    /// is its key and the bucket's suffix (nearly every entity) or a local file (named as it
    /// is) does not keep the name a second time, and the rare kinds are boxed (issue 40: a
    /// 32-character key was another ~80-byte string per file, and the kind 34 bytes).
    fileprivate enum StoredKind: Hashable, Sendable {
        case root
        case bucket(name: String)
        case group(name: String)
        /// `.file(bucket, .entity(key))` whose file name is the key's bytes and `suffixBytes` more.
        case entityNamedByKey(bucket: String, suffixBytes: UInt8)
        /// `.file(bucket, .localFile(name))` whose name is the file name.
        case localFile(bucket: String)
        indirect case other(NodeKind)

        init(_ kind: NodeKind, fileName: String) {
            switch kind {
            case .root: self = .root
            case .bucket(let name): self = .bucket(name: name)
            case .group(let name): self = .group(name: name)
            case .file(let bucket, .entity(let key)):
                let suffixBytes = fileName.utf8.count - key.utf8.count
                if (0...Int(UInt8.max)).contains(suffixBytes), fileName.utf8.starts(with: key.utf8) {
                    self = .entityNamedByKey(bucket: bucket, suffixBytes: UInt8(suffixBytes))
                } else {
                    self = .other(kind)
                }
            case .file(let bucket, .localFile(let name)) where exactlyEqual(name, fileName):
                self = .localFile(bucket: bucket)
            case .file, .symlink, .history: self = .other(kind)
            }
        }

        func kind(fileName: String) -> NodeKind {
            switch self {
            case .root: return .root
            case .bucket(let name): return .bucket(name: name)
            case .group(let name): return .group(name: name)
            case .entityNamedByKey(let bucket, let suffixBytes):
                let key = String(decoding: fileName.utf8.dropLast(Int(suffixBytes)), as: UTF8.self)
                return .file(bucket: bucket, item: .entity(key: key))
            case .localFile(let bucket): return .file(bucket: bucket, item: .localFile(name: fileName))
            case .other(let kind): return kind
            }
        }
    }

    /// An entity or local file (asked per `stat`: without making the kind).
    var isFile: Bool {
        switch storedKind {
        case .entityNamedByKey, .localFile, .other(.file): return true
        default: return false
        }
    }

    var isSymlink: Bool {
        if case .other(.symlink) = storedKind { return true }
        return false
    }

    /// The node as `PackedNodes` keeps it, its file name at `name` in their buffer: what every
    /// node has, and apart (nil for nearly every node) what a few have.
    func packed(name: PackedNodes.NameSpan) -> (node: PackedNode, rarelySet: RarelySetAttributes?) {
        let rarelySet = RarelySetAttributes(atime: storedAtime, aliasOf: storedAliasOf)
        let kept = rarelySet == Self.defaultRarelySet ? nil : rarelySet
        return (
            PackedNode(
                ino: ino, parent: parent, size: size, mtime: mtime, ctime: ctime, lookups: lookups, name: name,
                kind: storedKind, permissions: storedPermissions, linked: linked, removedElsewhere: removedElsewhere,
                hasRarelySet: kept != nil),
            kept
        )
    }

    init(_ packed: PackedNode, fileName: String, _ rarelySet: RarelySetAttributes?) {
        let rarelySet = rarelySet ?? Self.defaultRarelySet
        ino = packed.ino
        parent = packed.parent
        size = packed.size
        mtime = packed.mtime
        ctime = packed.ctime
        lookups = packed.lookups
        storedAtime = rarelySet.atime
        storedAliasOf = rarelySet.aliasOf
        storedFileName = fileName
        storedKind = packed.kind
        storedPermissions = packed.permissions
        linked = packed.linked
        removedElsewhere = packed.removedElsewhere
    }

    private static let defaultRarelySet = RarelySetAttributes(atime: noAtime, aliasOf: 0)

    /// Set by utimensat/`touch -a`: a file's is the store's, a directory's or lock link's lives
    /// for the mount's life; nil: the modification time (reads do not set it: noatime).
    var atime: MountTime? {
        get { storedAtime == Self.noAtime ? nil : storedAtime }
        set { storedAtime = newValue ?? Self.noAtime }
    }

    /// Permission bits set by chmod (never sent): a file's are the store's, a directory's or
    /// lock link's live for the mount's life; nil: the defaults (files 0644, directories 0755).
    var permissions: mode_t? {
        get { storedPermissions == Self.noPermissions ? nil : mode_t(storedPermissions) }
        set { storedPermissions = newValue.map { UInt16($0 & 0o7777) } ?? Self.noPermissions }
    }

    /// After a rename put another inode's bytes under this inode's name, or a remote change put
    /// another inode under its name, the kernel still holds this number for that name until it
    /// looks the name up again (and a rename of that name moves the number along); it then
    /// means `aliasOf`. (No inode is numbered 0.)
    var aliasOf: UInt64? {
        get { storedAliasOf == 0 ? nil : storedAliasOf }
        set { storedAliasOf = newValue ?? 0 }
    }

    var isDirectory: Bool {
        switch storedKind {
        case .root, .bucket, .group: return true
        case .entityNamedByKey, .localFile, .other(.file), .other(.symlink): return false
        case .other(.history(let path)): return path.isDirectory
        case .other(.root), .other(.bucket), .other(.group): return true
        }
    }

    /// A fresh record of the same inode (a listing, a save's entry) keeps what only memory
    /// holds: a directory's or lock link's atime and permission bits, which no entry carries.
    mutating func keepAttributes(of existing: Node) {
        atime = atime ?? existing.atime
        permissions = permissions ?? existing.permissions
    }

    var bucketName: String? {
        switch storedKind {
        case .root, .group: return nil
        case .bucket(let name): return name
        case .entityNamedByKey(let bucket, _), .localFile(let bucket): return bucket
        case .other(let kind):
            switch kind {
            case .root, .group, .history: return nil
            case .bucket(let name): return name
            case .file(let bucket, _), .symlink(let bucket, _, _): return bucket
            }
        }
    }
}

/// A node as a loaded bucket keeps a million of them (`PackedNodes`, issue 40): 80 bytes, its
/// file name in `PackedNodes`' buffer, without the attributes few nodes have
/// (`RarelySetAttributes`). (Permission bits stay: a text or bytes view gives every file its
/// own, and they fit beside the flags.)
struct PackedNode: Sendable {
    let ino: UInt64
    fileprivate let parent: UInt64
    fileprivate let size: Int
    fileprivate let mtime: MountTime
    fileprivate let ctime: MountTime
    fileprivate let lookups: UInt64
    /// Where `PackedNodes` keeps the file name.
    var name: PackedNodes.NameSpan
    fileprivate let kind: Node.StoredKind
    fileprivate let permissions: UInt16
    fileprivate let linked: Bool
    fileprivate let removedElsewhere: Bool
    /// Whether `PackedNodes` keeps `RarelySetAttributes` for this node.
    let hasRarelySet: Bool
}

/// What `touch -a` and a name's move to another inode set, as `Node` stores them.
struct RarelySetAttributes: Hashable, Sendable {
    fileprivate let atime: MountTime
    fileprivate let aliasOf: UInt64
}

extension PackedNodes {
    /// A node's lookup count, without making its name a String.
    func lookups(of ino: UInt64) -> UInt64? { packedNode(ino)?.node.lookups }

    /// The number node `ino` stands for (`Node.aliasOf`), without making its name a String.
    func aliasTarget(of ino: UInt64) -> UInt64? {
        guard let aliasOf = packedNode(ino)?.rarelySet?.aliasOf, aliasOf != 0 else { return nil }
        return aliasOf
    }
}

/// The inode numbers the kernel knows, their names and lookup counts.
///
/// Inode numbers are the store's stable ids (root is 1), so they survive remounts. The table is a
/// value inside `FileSystemState` and is only touched under that state's one lock (see
/// `BucketFileSystem`: the lock is never held across a backend call, a reply or a notification).
struct InodeTable: Sendable {
    static let rootInode: UInt64 = 1

    private(set) var nodes = PackedNodes()
    /// Each directory's names (`ChildNames`), by their bytes, as a local disk keeps them:
    /// `café.json` composed and decomposed are two files, as they are two keys in the bucket.
    private var children: [UInt64: ChildNames] = [:]
    private var loadedDirectories: Set<UInt64> = []
    /// Bumped for a directory whenever a name in it comes, goes or changes inode, from one counter
    /// for the whole table so a number is never reused: an unchanged version means the listing
    /// the kernel cached (`FOPEN_CACHE_DIR`) still holds.
    private var listingVersions: [UInt64: UInt64] = [:]
    private var lastListingVersion: UInt64 = 0
    /// Nodes that came into each directory (under a name new to it, or one that meant another
    /// inode) since its listing was last taken (`orderedListing`), in the order they came: the
    /// next listing sorts only these and merges them into the last one. A directory in
    /// `unorderedListings` added more than its size allows to keep; its next listing sorts every name.
    private var namesAdded: [UInt64: [UInt64]] = [:]
    private var unorderedListings: Set<UInt64> = []
    /// For each node, the numbers the kernel may hold that mean it (`alias`): few, and only
    /// until the kernel forgets them.
    private var aliasesOf: [UInt64: [UInt64]] = [:]
    /// For each directory, how many of the nodes in it (by `parent`, linked or not) the kernel
    /// holds: one it holds none of may leave memory (`unload`).
    private var referencedChildren: [UInt64: Int] = [:]

    init(rootTime: MountTime) {
        nodes[Self.rootInode] = Node(
            ino: Self.rootInode, parent: Self.rootInode, fileName: "", kind: .root, size: 0, mtime: rootTime,
            ctime: rootTime, lookups: 1)
        children[Self.rootInode] = ChildNames()
    }

    /// The node the kernel means by `ino` (following an alias), if it still exists.
    func node(_ ino: UInt64) -> Node? {
        if let target = nodes.aliasTarget(of: ino) { return nodes[target].flatMap { $0.linked ? $0 : nil } }
        return nodes[ino]
    }

    /// The node itself, without following aliases (for lookup counts).
    func record(_ ino: UInt64) -> Node? { nodes[ino] }

    func child(of parent: UInt64, named name: String) -> Node? {
        guard let ino = children[parent]?.inode(named: name, in: nodes) else { return nil }
        return nodes[ino]
    }

    /// How many names the directory holds.
    func childCount(of parent: UInt64) -> Int { children[parent]?.count ?? 0 }

    /// The directory's names and their numbers, made for the call, each name a String (for
    /// tests: the file system asks `child(of:named:)` and `childCount(of:)`).
    func childInodes(of parent: UInt64) -> [JSONKey: UInt64] {
        guard let names = children[parent] else { return [:] }
        var named: [JSONKey: UInt64] = [:]
        for ino in names.inodeNumbers {
            if let node = nodes[ino] { named[JSONKey(node.fileName)] = ino }
        }
        return named
    }

    /// The node a listing taken earlier holds as `ino` in `directory`, if its name is still
    /// there: the node itself or, for a number a rename or a remote change displaced, the node
    /// that took its name (the kernel's number for the name means it until the next lookup).
    func listedNode(_ ino: UInt64, in directory: UInt64) -> Node? {
        guard let node = node(ino), node.linked, node.parent == directory else { return nil }
        return node
    }

    /// Whether `ino` is in `directory`'s names under the name it has.
    private func isNamed(_ ino: UInt64, in names: ChildNames) -> Bool {
        guard let name = nodes.name(of: ino) else { return false }
        return names.contains(ino, hash: nodes.hash(name))
    }

    func isLoaded(_ directory: UInt64) -> Bool { loadedDirectories.contains(directory) }

    /// Changes whenever the directory's names do (0: never changed since the table began).
    func listingVersion(of directory: UInt64) -> UInt64 { listingVersions[directory] ?? 0 }

    private mutating func listingChanged(_ directory: UInt64) {
        lastListingVersion += 1
        listingVersions[directory] = lastListingVersion
    }

    private mutating func nameAdded(_ ino: UInt64, in directory: UInt64) {
        guard !unorderedListings.contains(directory) else { return }
        namesAdded[directory, default: []].append(ino)
        // Churn of the same few names must not grow the record past the directory it orders.
        if let count = namesAdded[directory]?.count, count > 2 * childCount(of: directory) + 1024 {
            namesAdded.removeValue(forKey: directory)
            unorderedListings.insert(directory)
        }
    }

    /// The directory's nodes sorted by name, by the names' bytes (`JSONKey`'s order), after
    /// `leading` (`.` and `..`): `ls` sorts 1,000,000 names that arrive in order in a third of
    /// the time it takes for names in hash order. `previous`: the listing last taken (sorted);
    /// only nodes added since are sorted, and merged into what it still holds.
    mutating func orderedListing(of directory: UInt64, after leading: [UInt64], previous: ArraySlice<UInt64>) -> [UInt64] {
        let current = children[directory] ?? ChildNames()
        var listing = leading
        listing.reserveCapacity(leading.count + current.count)
        defer {
            namesAdded.removeValue(forKey: directory)
            unorderedListings.remove(directory)
        }
        let nodes = self.nodes
        let named = { (ino: UInt64) in (ino: ino, name: nodes.name(of: ino)!) }
        guard !unorderedListings.contains(directory) else {
            listing += current.inodeNumbers.map(named).sorted { nodes.precedes($0.name, $1.name) }.map(\.ino)
            return listing
        }
        // Names come mostly in order (a bucket's first load is in key order), which sorting keeps
        // cheap. A node added and since removed, renamed away or displaced is not named here.
        var added = Set<UInt64>()
        let fresh = (namesAdded[directory] ?? []).filter { isNamed($0, in: current) && added.insert($0).inserted }
            .map(named).sorted { nodes.precedes($0.name, $1.name) }
        // Every node now in the directory is either added since or named as it was in
        // `previous`; a previous one that is gone, or that was added again, is left out.
        var next = fresh.startIndex
        for ino in previous where !added.contains(ino) && isNamed(ino, in: current) {
            let name = nodes.name(of: ino)!
            while next < fresh.endIndex, nodes.precedes(fresh[next].name, name) {
                listing.append(fresh[next].ino)
                next += 1
            }
            listing.append(ino)
        }
        listing += fresh[next...].map(\.ino)
        return listing
    }

    /// Replaces a directory's listing with what the store holds; names that vanished are unlinked.
    mutating func replaceListing(of directory: UInt64, with listing: [Node]) {
        // Set aside while the listing is recorded (each node leaves it before it takes another
        // name): what it still holds at the end are names the store no longer has.
        var previous = children.removeValue(forKey: directory) ?? ChildNames()
        nodes.reserveCapacity(forMore: listing.count - previous.count)
        var fresh = ChildNames()
        fresh.reserveCapacity(listing.count)
        var changed = !loadedDirectories.contains(directory)
        var added: [UInt64] = []
        // Numbers whose name another number took (a remote change the listing shows): the
        // kernel may hold the old one for the name yet.
        var displaced: [(source: UInt64, target: UInt64)] = []
        for var node in listing {
            if let existing = nodes[node.ino] {
                node.lookups = existing.lookups
                node.keepAttributes(of: existing)
                if existing.parent == directory {
                    if !exactlyEqual(existing.fileName, node.fileName) {
                        previous.remove(node.ino, named: existing.fileName, in: nodes)
                    }
                } else if children[existing.parent]?.remove(node.ino, named: existing.fileName, in: nodes) == true {
                    listingChanged(existing.parent)
                }
            }
            let holder = previous.remove(named: node.fileName, in: nodes)
            place(ownLinked(node))
            fresh.set(node.ino, named: node.fileName, in: nodes)
            if holder != node.ino {
                changed = true
                added.append(node.ino)
                if let holder { displaced.append((holder, node.ino)) }
            }
        }
        var vanished: [UInt64] = []
        for ino in previous.inodeNumbers {
            // Symlinks live only in memory: the store's listing does not mention them.
            if let node = nodes[ino], node.isSymlink {
                fresh.set(ino, named: node.fileName, in: nodes)
            } else {
                vanished.append(ino)
            }
        }
        children[directory] = fresh
        for ino in vanished { markUnlinked(ino) }
        for (source, target) in displaced where nodes[source]?.isFile == true && !isNamed(source, in: fresh) {
            alias(source, to: target)
        }
        if changed || !vanished.isEmpty { listingChanged(directory) }
        for ino in added { nameAdded(ino, in: directory) }
        loadedDirectories.insert(directory)
    }

    /// Records a node under its parent's name, unlinking whatever had that name before.
    mutating func upsert(_ node: Node) {
        var node = node
        if let existing = nodes[node.ino] {
            node.lookups = existing.lookups
            node.keepAttributes(of: existing)
            if existing.linked, existing.parent != node.parent || !exactlyEqual(existing.fileName, node.fileName),
                children[existing.parent]?.remove(node.ino, named: existing.fileName, in: nodes) == true
            {
                listingChanged(existing.parent)
            }
        }
        let holder = children[node.parent]?.remove(named: node.fileName, in: nodes)
        if let holder, holder != node.ino { markUnlinked(holder) }
        let moved = holder != node.ino
        if moved { listingChanged(node.parent) }
        place(ownLinked(node))
        children[node.parent, default: ChildNames()].set(node.ino, named: node.fileName, in: nodes)
        if moved { nameAdded(node.ino, in: node.parent) }
        if node.isDirectory, children[node.ino] == nil { children[node.ino] = ChildNames() }
    }

    /// utimensat on a node the store keeps no such time for (access times, lock links).
    mutating func setTimes(of ino: UInt64, atime: MountTime?, mtime: MountTime? = nil, ctime: MountTime? = nil) {
        nodes.modify(ino) { node in
            if let atime { node.atime = atime }
            if let mtime { node.mtime = mtime }
            if let ctime { node.ctime = ctime }
        }
    }

    mutating func setPermissions(of ino: UInt64, to permissions: mode_t) {
        nodes[ino]?.permissions = permissions & 0o777
    }

    /// Updates attributes of a known node (remote change, save result) without moving it.
    mutating func updateAttributes(of ino: UInt64, size: Int, mtime: MountTime, ctime: MountTime) {
        nodes.modify(ino) { node in
            node.size = size
            node.mtime = mtime
            node.ctime = ctime
        }
    }

    /// Removes a name from its directory; the inode stays while the kernel references it.
    mutating func unlink(parent: UInt64, name: String) {
        guard let ino = children[parent]?.remove(named: name, in: nodes) else { return }
        listingChanged(parent)
        markUnlinked(ino)
    }

    /// `target` took `source`'s place under a name the kernel may still hold `source` for (a
    /// rename that gave the file another number, a remote change that did): `source` means
    /// `target` from now on, and so does every number that meant `source` (a name displaced
    /// twice before the kernel looked it up again).
    mutating func alias(_ source: UInt64, to target: UInt64) {
        guard source != target, let node = nodes[source] else { return }
        if children[node.parent]?.remove(source, named: node.fileName, in: nodes) == true {
            listingChanged(node.parent)
        }
        forgetAlias(of: source)
        nodes.modify(source) { node in
            node.linked = false
            node.aliasOf = target
        }
        var meaningTarget = [source]
        for earlier in aliasesOf.removeValue(forKey: source) ?? [] where nodes.aliasTarget(of: earlier) == source {
            nodes.modify(earlier) { $0.aliasOf = target }
            meaningTarget.append(earlier)
        }
        aliasesOf[target, default: []] += meaningTarget
        dropIfUnreferenced(source)
    }

    /// Stores `node` in place of the record of its number, counting what the kernel holds by directory.
    private mutating func place(_ node: Node) {
        if let existing = nodes.packedNode(node.ino)?.node {
            countReference(lookups: existing.lookups, ino: existing.ino, parent: existing.parent, by: -1)
        }
        countReference(to: node, by: 1)
        nodes[node.ino] = node
    }

    private mutating func countReference(to node: Node, by change: Int) {
        countReference(lookups: node.lookups, ino: node.ino, parent: node.parent, by: change)
    }

    private mutating func countReference(lookups: UInt64, ino: UInt64, parent: UInt64, by change: Int) {
        guard lookups > 0, ino != parent else { return }
        let count = (referencedChildren[parent] ?? 0) + change
        referencedChildren[parent] = count == 0 ? nil : count
    }

    /// `node` as a listing or an upsert records it: under its name, meaning itself (no
    /// longer an alias of another number), and not removed.
    private mutating func ownLinked(_ node: Node) -> Node {
        forgetAlias(of: node.ino)
        var node = node
        node.linked = true
        node.aliasOf = nil
        node.removedElsewhere = false
        return node
    }

    /// `ino` no longer means another node (it is a node of its own again, or it is gone).
    private mutating func forgetAlias(of ino: UInt64) {
        guard let target = nodes.aliasTarget(of: ino) else { return }
        aliasesOf[target]?.removeAll { $0 == ino }
        if aliasesOf[target]?.isEmpty == true { aliasesOf.removeValue(forKey: target) }
    }

    /// A removal from elsewhere took this node's name (see `Node.removedElsewhere`).
    mutating func noteRemovedElsewhere(_ ino: UInt64) {
        guard nodes.packedNode(ino)?.node.linked == false else { return }
        nodes.modify(ino) { $0.removedElsewhere = true }
    }

    /// The kernel was handed this inode in an entry reply (lookup, create, mkdir, readdirplus).
    mutating func remember(_ ino: UInt64) {
        guard var node = nodes[ino] else { return }
        node.lookups += 1
        if node.lookups == 1 { countReference(to: node, by: 1) }
        nodes[ino] = node
    }

    /// The kernel dropped `count` references (forget). More than it was given is a kernel or
    /// bookkeeping bug: the count stops at zero and the caller logs it (returns false), rather
    /// than a trap taking down the mount and every unsaved buffer in it (issue 13).
    @discardableResult
    mutating func forget(_ ino: UInt64, count: UInt64) -> Bool {
        guard ino != Self.rootInode, let node = nodes[ino] else { return true }
        let honest = node.lookups >= count
        var forgotten = node
        forgotten.lookups = honest ? node.lookups - count : 0
        if node.lookups > 0, forgotten.lookups == 0 { countReference(to: node, by: -1) }
        nodes[ino] = forgotten
        dropIfUnreferenced(ino)
        return honest
    }

    /// Nodes the kernel holds (lookup count > 0), for invalidation after remote changes.
    func isReferenced(_ ino: UInt64) -> Bool { (nodes.lookups(of: ino) ?? 0) > 0 }

    /// Whether the kernel holds any node in `directory` (linked there, or unlinked from there
    /// and not forgotten yet: an alias, a file removed while open).
    func holdsReferences(in directory: UInt64) -> Bool { referencedChildren[directory] != nil }

    /// Drops a loaded directory's names and nodes from memory, as if it had never been listed:
    /// the next lookup or listing reads it from the store again. Only when the kernel holds none
    /// of them and each is a file the store keeps (a lock link lives only here). Returns how many
    /// nodes went; nil: the directory stays.
    mutating func unload(_ directory: UInt64) -> Int? {
        guard loadedDirectories.contains(directory), !holdsReferences(in: directory), let names = children[directory] else { return nil }
        for ino in names.inodeNumbers {
            guard let node = nodes[ino], node.isFile, node.lookups == 0, aliasesOf[ino] == nil else { return nil }
        }
        children[directory] = ChildNames()
        for ino in names.inodeNumbers { nodes.removeValue(forKey: ino) }
        namesAdded.removeValue(forKey: directory)
        unorderedListings.remove(directory)
        loadedDirectories.remove(directory)
        listingChanged(directory)
        nodes.shrinkIfSparse()
        return names.count
    }

    private mutating func markUnlinked(_ ino: UInt64) {
        guard let unlinked = nodes.modify(ino, { node -> Node in
            node.linked = false
            return node
        }) else { return }
        if unlinked.isDirectory {
            children.removeValue(forKey: ino)
            namesAdded.removeValue(forKey: ino)
            unorderedListings.remove(ino)
            loadedDirectories.remove(ino)
            listingChanged(ino)
        }
        dropIfUnreferenced(ino)
    }

    private mutating func dropIfUnreferenced(_ ino: UInt64) {
        guard let node = nodes.packedNode(ino)?.node, !node.linked, node.lookups == 0 else { return }
        forgetAlias(of: ino)
        // Numbers that meant it now mean nothing (the file is gone).
        aliasesOf.removeValue(forKey: ino)
        nodes.removeValue(forKey: ino)
    }
}
