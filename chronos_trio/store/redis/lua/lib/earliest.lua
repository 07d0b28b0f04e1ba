-- Of nsrc sorted sources (zsets, or due prefixes of them), how many of the
-- n earliest entries by score each holds: the share of each source in one
-- order by score across them. Entries of equal score in several sources are
-- taken source by source (the order among them is not the ID order).
-- head(s, r): the score of source s's entry at rank r (0-based), as Redis
-- wrote it (a string), or nil when it has none; upto(s, x): how many of its
-- entries have a score <= x (a score as head gave it; nil: any score).
-- No entry is read but a few heads; the rest is counted (ZCOUNT): each step
-- takes, from every source, all entries up to a bound, when that many are
-- still wanted (the bound: the source with the lowest head, a fair share
-- of entries on), else what the lowest source holds up to the next
-- source's head. So a batch enqueued at one due time costs a count per
-- source it comes from, and entries of many due times a few rounds of
-- counts. Scores are compared as read first: Redis writes equal scores
-- alike, so only unequal ones are converted to numbers (tonumber is costly).
-- Returns took (per source).
local function earliest(nsrc, n, head, upto)
  local took, hs, hn = {}, {}, {}
  local function number(s)
    local x = hn[s]
    if not x then
      x = tonumber(hs[s])
      hn[s] = x
    end
    return x
  end
  local function below(a, b)  -- whether a's head is lower than b's
    return hs[a] ~= hs[b] and number(a) < number(b)
  end
  for s = 1, nsrc do
    took[s] = 0
    hs[s] = head(s, 0)
  end
  local remaining = n
  while remaining > 0 do
    -- the source with the lowest head (the first of equals), and the next
    local best, second, live = nil, nil, 0
    for s = 1, nsrc do
      if hs[s] then
        live = live + 1
        if not best then
          best = s
        elseif below(s, best) then
          best, second = s, best
        elseif not second or below(s, second) then
          second = s
        end
      end
    end
    if not best then break end
    local gave = false
    -- all sources up to a bound, when that is no more than wanted
    local k = math.floor(0.8 * remaining / live)
    if second and k >= 2 then
      local bound = head(best, took[best] + k - 1)
      if bound and bound ~= hs[best] then
        local counts, total = {}, 0
        for s = 1, nsrc do
          if hs[s] then
            counts[s] = upto(s, bound) - took[s]
            total = total + counts[s]
          end
        end
        if total <= remaining then
          for s, c in pairs(counts) do
            if c > 0 then
              took[s] = took[s] + c
              hs[s], hn[s] = head(s, took[s]), nil
            end
          end
          remaining = remaining - total
          gave = true
        end
      end
    end
    if not gave then
      -- the lowest source, up to the next source's head
      local give = remaining
      if second then give = math.max(1, upto(best, hs[second]) - took[best]) end
      if give > remaining then give = remaining end
      took[best] = took[best] + give
      remaining = remaining - give
      if remaining > 0 then
        hs[best], hn[best] = head(best, took[best]), nil
      end
    end
  end
  return took
end
