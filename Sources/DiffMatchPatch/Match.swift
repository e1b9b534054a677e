/// Fuzzy matching (`match_main`, `match_bitap_`, `match_alphabet_`) on UTF-16 code units.
extension DiffMatchPatch {
    func matchMainUnits(_ text: [UInt16], _ pattern: [UInt16], _ location: Int) -> Int? {
        let loc = max(0, min(location, text.count))
        if text == pattern { return 0 }
        if text.isEmpty { return nil }
        if loc + pattern.count <= text.count && text[loc..<(loc + pattern.count)].elementsEqual(pattern) {
            return loc
        }
        // The reference throws for patterns longer than its bit masks; here that is "no match".
        if pattern.count > effectiveMaxBits { return nil }
        return bitap(text, pattern, loc)
    }

    /// Bit masks are UInt64; the reference uses 32 (JavaScript's bitwise operators).
    var effectiveMaxBits: Int { min(max(matchMaxBits, 1), 64) }

    /// Bitap (Wu-Manber) search for `pattern` near `loc`, allowing errors up to `matchThreshold`.
    func bitap(_ text: [UInt16], _ pattern: [UInt16], _ loc: Int) -> Int? {
        guard !pattern.isEmpty else { return loc }
        let alphabet = matchAlphabet(pattern)
        let patternCount = pattern.count

        func score(_ errors: Int, _ x: Int) -> Double {
            let accuracy = Double(errors) / Double(patternCount)
            let proximity = abs(loc - x)
            if matchDistance == 0 {
                // Dodge divide by zero.
                return proximity != 0 ? 1.0 : accuracy
            }
            return accuracy + Double(proximity) / Double(matchDistance)
        }

        var threshold = matchThreshold
        // Is there a nearby exact match? (speedup)
        if let exact = UnitSearch.indexOf(text, pattern, from: loc) {
            threshold = min(score(0, exact), threshold)
            if let exactBack = UnitSearch.lastIndexOf(text, pattern, from: loc + patternCount) {
                threshold = min(score(0, exactBack), threshold)
            }
        }

        let matchMask: UInt64 = 1 &<< UInt64(patternCount - 1)
        var bestLoc = -1
        var binMin: Int
        var binMid: Int
        var binMax = patternCount + text.count
        var lastRd: [UInt64] = []
        for d in 0..<patternCount {
            // Binary search for how far from loc this error level can stray.
            binMin = 0
            binMid = binMax
            while binMin < binMid {
                if score(d, loc + binMid) <= threshold {
                    binMin = binMid
                } else {
                    binMax = binMid
                }
                binMid = (binMax - binMin) / 2 + binMin
            }
            binMax = binMid
            var start = max(1, loc - binMid + 1)
            let finish = min(loc + binMid, text.count) + patternCount

            var rd = [UInt64](repeating: 0, count: finish + 2)
            rd[finish + 1] = (1 &<< UInt64(d)) &- 1
            var j = finish
            while j >= start {
                let charMatch: UInt64 = j - 1 < text.count ? (alphabet[text[j - 1]] ?? 0) : 0
                if d == 0 {
                    // First pass: exact match.
                    rd[j] = ((rd[j + 1] &<< 1) | 1) & charMatch
                } else {
                    // Subsequent passes: fuzzy match.
                    let previousNext = j + 1 < lastRd.count ? lastRd[j + 1] : 0
                    let previousHere = j < lastRd.count ? lastRd[j] : 0
                    rd[j] = (((rd[j + 1] &<< 1) | 1) & charMatch)
                        | (((previousNext | previousHere) &<< 1) | 1)
                        | previousNext
                }
                if rd[j] & matchMask != 0 {
                    let value = score(d, j - 1)
                    // This match will almost certainly be better than any existing match.
                    if value <= threshold {
                        threshold = value
                        bestLoc = j - 1
                        if bestLoc > loc {
                            // When passing loc, don't exceed our current distance from loc.
                            start = max(1, 2 * loc - bestLoc)
                        } else {
                            // Already passed loc, downhill from here on in.
                            break
                        }
                    }
                }
                j -= 1
            }
            // No hope for a (better) match at greater error levels.
            if score(d + 1, loc) > threshold { break }
            lastRd = rd
        }
        return bestLoc >= 0 ? bestLoc : nil
    }

    /// Bit mask of each unit's positions in the pattern (`match_alphabet_`).
    func matchAlphabet(_ pattern: [UInt16]) -> [UInt16: UInt64] {
        var alphabet: [UInt16: UInt64] = [:]
        for (index, unit) in pattern.enumerated() {
            alphabet[unit, default: 0] |= 1 &<< UInt64(pattern.count - index - 1)
        }
        return alphabet
    }
}
