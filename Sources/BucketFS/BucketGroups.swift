/// Buckets in two directory levels: a bucket named `group/leaf` (Telepat's `context/model`)
/// shows as `DIR/<group>/<leaf>/`, each level named as a bucket is (`FileNameCodec.encode`);
/// a bucket with no `/` shows at the root as before. A group directory stands for the buckets
/// whose names start with `<group>/`: it exists while one does, holds nothing else, and is
/// not stored anywhere (its inode number lives in memory, like the `.history` view's).
public enum BucketGroups {
    static let separator: Character = "/"

    /// The group a bucket sits in (before the first `/`), or nil for a bucket at the root.
    public static func group(of bucket: String) -> String? {
        guard let slash = bucket.firstIndex(of: separator) else { return nil }
        return String(bucket[..<slash])
    }

    /// What the bucket's own directory shows as (after the first `/`, or the whole name).
    public static func leaf(of bucket: String) -> String {
        guard let slash = bucket.firstIndex(of: separator) else { return bucket }
        return String(bucket[bucket.index(after: slash)...])
    }

    /// The bucket named by `leaf` inside `group` (nil: at the root).
    public static func bucket(group: String?, leaf: String) -> String {
        guard let group else { return leaf }
        return group + String(separator) + leaf
    }

    /// The parts of a bucket name that must each be a valid bucket name on their own.
    static func parts(of bucket: String) -> [String] {
        guard let group = group(of: bucket) else { return [bucket] }
        return [group, leaf(of: bucket)]
    }
}

extension FileSystemState {
    /// The root's listing: buckets without a group, and one directory per group.
    mutating func rootListing(_ buckets: [MountBucket]) -> [Node] {
        var listing: [Node] = []
        var groups: [String: Node] = [:]
        for bucket in buckets {
            guard let group = BucketGroups.group(of: bucket.name) else {
                listing.append(BucketFileSystem.node(for: bucket, parent: InodeTable.rootInode))
                continue
            }
            var node = groups[group] ?? Node(
                ino: groupInodes.number(for: group), parent: InodeTable.rootInode, fileName: FileNameCodec.encode(group),
                kind: .group(name: group), size: 0, mtime: bucket.ctime, ctime: bucket.ctime)
            node.mtime = max(node.mtime, bucket.ctime)
            node.ctime = node.mtime
            groups[group] = node
        }
        return listing + groups.values
    }

    /// The directory node of a bucket, if it is in the tree (its group listed, for a grouped one).
    func bucketNode(named bucket: String) -> Node? {
        var parent = InodeTable.rootInode
        if let group = BucketGroups.group(of: bucket) {
            guard let groupNode = table.child(of: parent, named: FileNameCodec.encode(group)) else { return nil }
            parent = groupNode.ino
        }
        return table.child(of: parent, named: FileNameCodec.encode(BucketGroups.leaf(of: bucket)))
    }
}
